"""What NeMo RL's `run_multi_turn_rollout` does with an environment, restated for tests.

Per turn: generate for the active samples (cut at `max_new_tokens`) and append each
generation to its message log as an assistant message (content decoded without special
tokens, token_ids the generated ids); call `env.step` on the active samples'
role/content logs and their `extra_env_info`; add the rewards to each sample's total;
append each observation with `token_ids = tokenizer(content, add_special_tokens=False)`
(no chat template); samples that terminated stop; the others continue with the returned
metadata (when not None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def run(
    env: Any,
    batch: list[dict[str, Any]],
    tokenizer: Any,
    generate: Callable[[int, list[int]], list[int]],
    max_turns: int = 20,
    max_new_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """`generate(sample_index, input_ids) -> generated ids` plays the policy.

    `max_new_tokens` cuts each generation as vLLM's `max_tokens` does (NeMo RL's vLLM
    worker sends `generation.max_new_tokens`): a cut reply has no EOS.
    """
    active = list(range(len(batch)))
    for sample in batch:
        sample["total_reward"] = 0.0
        sample["turns"] = 0
    for _ in range(max_turns):
        if not active:
            break
        for i in active:
            ids = torch.cat([m["token_ids"] for m in batch[i]["message_log"]]).tolist()
            generated = generate(i, ids)[:max_new_tokens]
            text = tokenizer.decode(generated, skip_special_tokens=True)
            batch[i]["message_log"].append(
                {"role": "assistant", "content": text, "token_ids": torch.tensor(generated)}
            )
        logs = [
            [{"role": m["role"], "content": m["content"]} for m in batch[i]["message_log"]]
            for i in active
        ]
        metadata = [batch[i]["extra_env_info"] for i in active]
        returned = env.step(logs, metadata)
        observations, new_metadata, _stops, rewards, terminateds, _answers = returned
        still = []
        for k, i in enumerate(active):
            batch[i]["total_reward"] += float(rewards[k])
            batch[i]["turns"] += 1
            content = observations[k]["content"]
            ids = tokenizer(content, return_tensors="pt", add_special_tokens=False).input_ids[0]
            batch[i]["message_log"].append(
                {"role": observations[k]["role"], "content": content, "token_ids": ids.long()}
            )
            if not bool(terminateds[k]):
                still.append(i)
                if new_metadata[k] is not None:
                    batch[i]["extra_env_info"] = new_metadata[k]
        active = still
    return batch
