"""NeMo Gym's own verifiers, called in isolation: run with the Python of a venv that has the
`nemo-gym` 0.7.0 wheel (and its servers' verify dependencies) installed, never ours.

Reads JSON lines {"server", "row", "response"} on stdin and writes one JSON line per
input: {"reward": float} or {"error": "..."}. A game (a Gymnasium-style server: wordle,
grl_sokoban) is replayed instead: {"server", "row", "steps": [response, ...]} runs its
`reset` on the row and its `step` on each response, as NeMo Gym's gymnasium agent does,
and answers {"reward": the summed step rewards, "observations": [...], "steps": n}.
Each server's app is imported from the wheel's `resources_servers/<server>/app.py`, its
server class built with a minimal config (no judge: `should_use_judge=False`), and
`verify` awaited on the row plus the response, exactly as NeMo Gym's HTTP endpoint would
call it. A stateful server (one whose `verify` reads the request's session) is driven as
NeMo Gym's simple agent drives it: `seed_session`, each function call through its
handler, then `verify`.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import sys
import typing
from pathlib import Path
from unittest.mock import MagicMock

CONFIG = {"host": "127.0.0.1", "port": 0, "entrypoint": "", "name": ""}
OVERRIDES = {
    "math_with_judge": {
        "judge_model_server": {"type": "responses_api_models", "name": "judge"},
        "judge_responses_create_params": {"input": []},
        "should_use_judge": False,
    },
    "wmt_translation": {"compute_comet": False, "language_consistency_backend": None},
}
OVERRIDES["polymath"] = OVERRIDES["math_with_judge"]
# Its configs/single_step_tool_use_with_argument_comparison.yaml.
OVERRIDES["single_step_tool_use_with_argument_comparison"] = {
    "tool_call_comparator_config": {"word_count_similarity_threshold": 0.1}
}


def _server(name: str):  # type: ignore[no-untyped-def]
    import resources_servers
    from nemo_gym.server_utils import ServerClient

    folder = Path(next(iter(resources_servers.__path__))) / name
    sys.path.insert(0, str(folder))
    module = importlib.import_module(f"resources_servers.{name}.app")
    from nemo_gym.base_resources_server import SimpleResourcesServer

    classes = [
        c
        for c in vars(module).values()
        if inspect.isclass(c)
        and issubclass(c, SimpleResourcesServer)
        and c.__module__ == module.__name__
    ]
    cls = classes[-1]
    config_cls = typing.get_type_hints(cls)["config"]
    config = config_cls(**CONFIG, **OVERRIDES.get(name, {}))
    server = cls(config=config, server_client=MagicMock(spec=ServerClient))
    if name == "wordle":
        _wordle_guesses(folder)
    if name == "wmt_translation":
        # Its reward is chrF; only the spBLEU side metric needs the FLORES-200 model, which
        # it downloads on first use (there is no network here), so that metric is stubbed.
        object.__setattr__(server, "_score_sentence_spbleu", lambda *args, **kwargs: 0.0)
    request_cls = typing.get_type_hints(cls.verify)["body"]
    return server, request_cls


def _stateful(server) -> bool:  # type: ignore[no-untyped-def]
    return "request" in inspect.signature(server.verify).parameters


def _wordle_guesses(folder: Path) -> None:
    """NeMo Gym's wordle reads data/guesses.txt, which its generate_data.py downloads (ENABLE's
    five-letter words); no network here, so it is written from the same list, which ships
    in our package (checked against generate_data.py's count)."""
    target = folder / "data" / "guesses.txt"
    if target.is_file():
        return
    source = Path(os.environ["NEMO_GYM_ENABLE_WORDS"]).read_text().splitlines()
    words = [w for w in source if w and not w.startswith("#")]
    assert len(words) == 8636, len(words)  # generate_data.py asserts the same count
    target.write_text("".join(w + "\n" for w in words))


async def _episode(server, row: dict, steps: list[dict]) -> dict:  # type: ignore[no-untyped-def]
    """NeMo Gym's gymnasium agent's loop: reset on the row's fields, then one step per
    model response until the server says the episode ended."""
    from nemo_gym.openai_utils import NeMoGymResponse

    fields = {k: v for k, v in row.items() if k != "responses_create_params"}
    observation, _ = await server.reset(fields, "session")
    observations, total, taken = [observation], 0.0, 0
    for response in steps:
        action = NeMoGymResponse.model_validate(response)
        observation, reward, terminated, truncated, _ = await server.step(action, fields, "session")
        observations.append(observation)
        total, taken = total + reward, taken + 1
        if terminated or truncated:
            break
    return {"reward": total, "observations": observations, "steps": taken}


class _Request:
    """What a stateful server's handlers read of the HTTP request: its session (a new one
    per case, as each rollout of NeMo Gym's agent gets its own)."""

    def __init__(self) -> None:
        import uuid

        from nemo_gym.server_utils import SESSION_ID_KEY

        self.session = {SESSION_ID_KEY: uuid.uuid4().hex}


async def _session(server, request_cls, row: dict, response: dict) -> dict:  # type: ignore[no-untyped-def]
    """A stateful server (its `verify` reads the request's session), as NeMo Gym's simple
    agent drives it: `seed_session` on the row, each function call of the response posted
    to the server's handler of that name, in order, then `verify`, in one session."""
    from pydantic import ValidationError

    request = _Request()
    seed_cls = typing.get_type_hints(server.seed_session)["body"]
    await server.seed_session(request, seed_cls.model_validate(row))
    for item in response["output"]:
        if item["type"] != "function_call":
            continue
        handler = getattr(server, item["name"])
        hints = {k: v for k, v in typing.get_type_hints(handler).items() if k != "return"}
        if "body" in hints:
            try:
                body = hints["body"].model_validate_json(item["arguments"])
            except ValidationError:
                continue  # FastAPI answers 422; the agent shows the error, nothing changes
            await handler(request, body)
        else:
            await handler(request)
    body = request_cls.model_validate({**row, "response": response})
    result = await server.verify(request, body)
    return {"reward": float(result.reward)}


async def main() -> None:
    out, sys.stdout = sys.stdout, sys.stderr  # the servers print; only results go to stdout
    cache: dict[str, tuple] = {}
    for line in sys.stdin:
        case = json.loads(line)
        try:
            if case["server"] not in cache:
                cache[case["server"]] = _server(case["server"])
            server, request_cls = cache[case["server"]]
            if "steps" in case:
                found = await _episode(server, case["row"], case["steps"])
                print(json.dumps(found), file=out, flush=True)
                continue
            if _stateful(server):
                found = await _session(server, request_cls, case["row"], case["response"])
                print(json.dumps(found), file=out, flush=True)
                continue
            body = request_cls.model_validate({**case["row"], "response": case["response"]})
            result = await server.verify(body)
            print(json.dumps({"reward": float(result.reward)}), file=out, flush=True)
        except Exception as exc:  # reported per case, the run goes on
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]}), file=out, flush=True)


if __name__ == "__main__":
    os.environ.setdefault("NEMO_GYM_LOG_LEVEL", "ERROR")
    asyncio.run(main())
