"""Token-exact training batches from rollouts: ids, loss masks, logprobs, advantages.

```python
groups = [g async for g in gym.groups(env, policy, tasks=batch, repeats=8)]
batch = gym.training.build(groups, advantage="grpo")
tensors = batch.collate(pad_token_id=tokenizer.pad_token_id, padding_side="right")
loss = -(tensors["advantages"][:, None] * ratio * tensors["loss_mask"]).sum() / ...
```

Every rollout becomes one `TrainingSample` built on `Trajectory.token_trace()`: the
exact ids the policy saw and produced across every turn, a loss mask that is 1 only on
tokens the policy generated, the behaviour logprob of each of those tokens, and the
span of each model turn. Nothing is re-tokenized here: a rollout whose ids cannot be
trusted (the backend re-rendered the history, gave no ids, or logprobs that do not line
up with its ids) and a failed rollout are *excluded*: they keep their row, with an
all-zero loss mask, advantage 0 and the reason in `TrainingSample.excluded`, and they
never enter a group's baseline. A failed rollout is masked, never scored 0.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from nemo_gym.errors import ConfigError, HarnessError, MissingDependency
from nemo_gym.records import Rollout, Sampling, Task

if TYPE_CHECKING:
    import torch

    from nemo_gym.integrations.bridge import LoopThread
    from nemo_gym.protocols import Environment, Harness, Model

log = logging.getLogger(__name__)

__all__ = [
    "ADVANTAGES",
    "GRPO_EPSILON",
    "AdvantageMethod",
    "AsyncRollouts",
    "GenerationCopy",
    "Play",
    "Step",
    "TrainingBatch",
    "TrainingSample",
    "build",
    "collate",
    "group_advantages",
    "sample",
]

AdvantageMethod = Literal["grpo", "dr_grpo", "rloo"]
GRPO_EPSILON = 1e-4
"""The `grpo` advantage's `std + epsilon` term: TRL's `GRPOTrainer` value (verl uses 1e-6)."""
ADVANTAGES: tuple[AdvantageMethod, ...] = ("grpo", "dr_grpo", "rloo")
"""The advantage estimators `build` and `group_advantages` accept."""


@dataclass(frozen=True, slots=True)
class TrainingSample:
    """One rollout as training data.

    `token_ids` is the whole multi-turn sequence; `loss_mask[i]` is 1 where the policy
    generated `token_ids[i]`; `logprobs[i]` is its behaviour logprob there (0.0 off the
    mask), or `logprobs` is None when the backend reported none. `turns[k]` is the
    `[start, end)` span of the k-th model turn's generated tokens, `prompt_length` the
    number of tokens before the first of them. `step_rewards` are the environment's
    per-step rewards (Gymnasium-style episodes; one per step, in order). `reward` is
    None for an excluded sample, whose `excluded` says why and whose mask is all zero.
    `weights_version` is the version of the weights that sampled it, where the
    rollout records one (`AsyncRollouts` does).
    """

    task_id: str
    repeat: int
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float] | None
    prompt_length: int
    turns: tuple[tuple[int, int], ...]
    reward: float | None
    components: Mapping[str, float] = field(default_factory=dict)
    step_rewards: tuple[float, ...] = ()
    advantage: float = 0.0
    group: int = 0
    excluded: str | None = None
    weights_version: int | None = None

    @property
    def trainable(self) -> bool:
        """True when this sample contributes to the loss."""
        return self.excluded is None

    @property
    def num_generated(self) -> int:
        """How many tokens the policy generated (the mask's ones)."""
        return sum(self.loss_mask)


def _excluded(rollout: Rollout, reason: str, **tokens: Any) -> TrainingSample:
    ids = tokens.get("token_ids", [])
    return TrainingSample(
        task_id=rollout.task_id,
        repeat=rollout.repeat,
        token_ids=ids,
        loss_mask=[0] * len(ids),
        logprobs=None,
        prompt_length=len(ids),
        turns=(),
        reward=None,
        step_rewards=tuple(rollout.trajectory.step_rewards),
        excluded=reason,
        weights_version=_version_of(rollout),
    )


def _version_of(rollout: Rollout) -> int | None:
    version = rollout.metadata.get("weights_version")
    return version if isinstance(version, int) else None


def sample(rollout: Rollout, *, max_length: int | None = None) -> TrainingSample:
    """The training view of one rollout (advantage 0 until `build` sets it).

    Excluded, with the reason: a failed rollout (`failed: <kind>/<code>`), one that
    made no model call, one whose tokens came from two versions of the weights
    (`weights_changed`), a backend that gave no token ids, a history that was
    re-tokenized, logprobs that do not line up with the completion ids, and, when
    `max_length` is given, a sequence longer than that (never silently cut).
    """
    if not rollout.ok:
        failure = rollout.failure
        reason = f"failed: {failure.kind}/{failure.code}" if failure else "failed"
        return _excluded(rollout, reason)
    if rollout.rewards is None:
        return _excluded(rollout, "no reward")
    calls = [c for c in rollout.trajectory.model_calls if c.response is not None]
    if not calls:
        return _excluded(rollout, "no model call")
    for index, call in enumerate(calls):
        response = call.response
        assert response is not None
        if response.prompt_token_ids is None or response.completion_token_ids is None:
            return _excluded(rollout, f"no token ids: model call {index} carries none")
        if response.metadata.get("weights_changed"):
            # Its tokens came from two versions of the weights: no one policy's sample.
            return _excluded(
                rollout, f"mixed weights: the weights changed during model call {index}"
            )
        logprobs = response.completion_logprobs
        if logprobs is not None and len(logprobs) != len(response.completion_token_ids):
            return _excluded(
                rollout,
                f"logprobs misaligned: model call {index} has "
                f"{len(logprobs)} logprobs for "
                f"{len(response.completion_token_ids)} completion tokens",
            )
    try:
        trace = rollout.trajectory.token_trace()
    except HarnessError as exc:
        return _excluded(rollout, f"retokenized: {exc}")
    turns: list[tuple[int, int]] = []
    position = 0
    for call in calls:
        response = call.response
        assert response is not None
        start = len(response.prompt_token_ids or ())
        end = start + len(response.completion_token_ids or ())
        if start < position:  # token_trace guarantees the prefix; this is belt and braces
            return _excluded(rollout, "retokenized: turns overlap")
        turns.append((start, end))
        position = end
    if not trace.token_ids or sum(trace.loss_mask) == 0:
        return _excluded(rollout, "no generated tokens", token_ids=trace.token_ids)
    if max_length is not None and len(trace.token_ids) > max_length:
        return _excluded(
            rollout,
            f"too long: {len(trace.token_ids)} tokens > max_length={max_length}",
            token_ids=trace.token_ids,
        )
    rewards = rollout.rewards
    return TrainingSample(
        task_id=rollout.task_id,
        repeat=rollout.repeat,
        token_ids=trace.token_ids,
        loss_mask=trace.loss_mask,
        logprobs=trace.logprobs,
        prompt_length=turns[0][0],
        turns=tuple(turns),
        reward=rewards.reward,
        components=dict(rewards.components),
        step_rewards=tuple(rollout.trajectory.step_rewards),
        weights_version=_version_of(rollout),
    )


def group_advantages(
    rewards: Sequence[float | None],
    method: AdvantageMethod = "grpo",
    *,
    epsilon: float = GRPO_EPSILON,
) -> list[float]:
    """Advantages of one group's rewards; a None reward (masked) gets 0 and no say.

    - `grpo`: `(r - mean) / (std + epsilon)`, std with Bessel's correction (as TRL and
      verl compute it); a group of one, or of equal rewards, gets 0. `epsilon` defaults
      to TRL's 1e-4 (`GRPO_EPSILON`); pass 1e-6 to match verl's
      `compute_grpo_outcome_advantage`. It matters where the std is small: two rewards
      0.0 and 0.001 get advantages +-0.62 with 1e-4 and +-0.71 with 1e-6.
    - `dr_grpo`: `r - mean` (Dr. GRPO drops the std; its other change, a constant
      length normaliser, belongs to the loss).
    - `rloo`: `r - mean of the others` (leave-one-out baseline); 0 with fewer than two.

    Only the non-None rewards form the baseline.
    """
    if method not in ADVANTAGES:
        raise ValueError(f"unknown advantage method {method!r}; choose from {ADVANTAGES}")
    valid = [r for r in rewards if r is not None]
    for value in valid:
        if not math.isfinite(value):
            raise ValueError(f"a reward must be finite to compute advantages, got {value!r}")
    n = len(valid)
    if n == 0:
        return [0.0] * len(rewards)
    mean = math.fsum(valid) / n
    if method == "grpo":
        if n < 2:
            return [0.0] * len(rewards)
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in valid) / (n - 1))
        # Equal rewards carry no signal; rounding must not turn them into +-1/epsilon.
        if std <= 1e-12 * max(1.0, abs(mean)):
            return [0.0] * len(rewards)
        return [0.0 if r is None else (r - mean) / (std + epsilon) for r in rewards]
    if method == "dr_grpo":
        return [0.0 if r is None else r - mean for r in rewards]
    if n < 2:
        return [0.0] * len(rewards)
    total = math.fsum(valid)
    return [0.0 if r is None else r - (total - r) / (n - 1) for r in rewards]


@dataclass(frozen=True, slots=True)
class TrainingBatch:
    """The samples of some groups, with advantages set; `collate` makes tensors."""

    samples: list[TrainingSample]
    advantage: AdvantageMethod = "grpo"

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def trainable(self) -> list[TrainingSample]:
        return [s for s in self.samples if s.trainable]

    @property
    def excluded(self) -> dict[str, int]:
        """How many samples were excluded, by reason (the part before any ':' detail)."""
        return dict(Counter(_reason_key(s.excluded) for s in self.samples if s.excluded))

    def metrics(self) -> dict[str, float]:
        """Numbers worth logging each step: counts, reward mean, tokens, exclusions."""
        rewards = [s.reward for s in self.samples if s.reward is not None]
        groups = {s.group for s in self.samples}
        flat = 0
        for group in groups:
            values = [s.reward for s in self.samples if s.group == group and s.reward is not None]
            if len(values) > 1 and max(values) == min(values):
                flat += 1
        out: dict[str, float] = {
            "samples": float(len(self.samples)),
            "trainable": float(len(rewards)),
            "reward_mean": math.fsum(rewards) / len(rewards) if rewards else float("nan"),
            "generated_tokens": float(sum(s.num_generated for s in self.samples)),
            "groups_without_signal": float(flat),
        }
        for reason, count in self.excluded.items():
            out[f"excluded/{reason}"] = float(count)
        return out

    def collate(
        self,
        *,
        pad_token_id: int,
        padding_side: Literal["left", "right"] = "right",
        pad_to_multiple_of: int | None = None,
        drop_excluded: bool = False,
        device: Any = None,
    ) -> dict[str, torch.Tensor]:
        """Padded tensors of these samples; see `collate`."""
        samples = self.trainable if drop_excluded else self.samples
        return collate(
            samples,
            pad_token_id=pad_token_id,
            padding_side=padding_side,
            pad_to_multiple_of=pad_to_multiple_of,
            device=device,
        )


def _reason_key(reason: str | None) -> str:
    return (reason or "").split(":", 1)[0]


def build(
    groups: Iterable[Sequence[Rollout]],
    *,
    advantage: AdvantageMethod = "grpo",
    epsilon: float = GRPO_EPSILON,
    max_length: int | None = None,
) -> TrainingBatch:
    """Samples of every rollout in `groups` (what `gym.groups` yields), with advantages.

    Each group is the repeats of one task; its baseline is computed from its trainable
    samples only. Sample order follows the input; `TrainingSample.group` is the index
    of its group.
    """
    if advantage not in ADVANTAGES:
        raise ValueError(f"unknown advantage method {advantage!r}; choose from {ADVANTAGES}")
    samples: list[TrainingSample] = []
    for index, group in enumerate(groups):
        members = [sample(r, max_length=max_length) for r in group]
        values = group_advantages([m.reward for m in members], advantage, epsilon=epsilon)
        samples.extend(
            replace(m, advantage=a, group=index) for m, a in zip(members, values, strict=True)
        )
    return TrainingBatch(samples=samples, advantage=advantage)


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise MissingDependency("torch", "local") from exc
    return torch


def collate(
    samples: Sequence[TrainingSample],
    *,
    pad_token_id: int,
    padding_side: Literal["left", "right"] = "right",
    pad_to_multiple_of: int | None = None,
    device: Any = None,
) -> dict[str, torch.Tensor]:
    """Pad samples into tensors of shape `[batch, length]` (and `[batch]` per row).

    Returns `input_ids`, `attention_mask` (1 on real tokens), `position_ids` (counted
    from each row's first real token, 0 on padding), `loss_mask` (1 on generated tokens
    of trainable rows), `logprobs` (behaviour logprobs on the mask, 0.0 elsewhere),
    `turn_index` (which model turn generated each token, -1 elsewhere), and per row
    `advantages`, `rewards` (NaN for excluded rows), `sample_mask` (True where the row
    trains) and `has_logprobs`. A row with no tokens at all (a rollout that failed
    before its first model call) holds one attended pad token, so no attention row is
    empty.
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
        raise ValueError(f"pad_to_multiple_of must be >= 1, got {pad_to_multiple_of}")
    torch = _torch()
    lengths = [max(1, len(s.token_ids)) for s in samples]
    width = max(lengths, default=1)
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    rows = len(samples)
    input_ids = torch.full((rows, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    positions = torch.zeros((rows, width), dtype=torch.long)
    loss_mask = torch.zeros((rows, width), dtype=torch.long)
    logprobs = torch.zeros((rows, width), dtype=torch.float32)
    turn_index = torch.full((rows, width), -1, dtype=torch.long)
    for row, (item, length) in enumerate(zip(samples, lengths, strict=True)):
        start = width - length if padding_side == "left" else 0
        span = slice(start, start + length)
        attention[row, span] = 1
        positions[row, span] = torch.arange(length)
        if not item.token_ids:
            continue
        input_ids[row, span] = torch.tensor(item.token_ids, dtype=torch.long)
        if item.trainable:
            loss_mask[row, span] = torch.tensor(item.loss_mask, dtype=torch.long)
            if item.logprobs is not None:
                logprobs[row, span] = torch.tensor(item.logprobs, dtype=torch.float32)
            for turn, (begin, end) in enumerate(item.turns):
                turn_index[row, start + begin : start + end] = turn
    out = {
        "input_ids": input_ids,
        "attention_mask": attention,
        "position_ids": positions,
        "loss_mask": loss_mask,
        "logprobs": logprobs,
        "turn_index": turn_index,
        "advantages": torch.tensor([s.advantage for s in samples], dtype=torch.float32),
        "rewards": torch.tensor(
            [float("nan") if s.reward is None else s.reward for s in samples],
            dtype=torch.float32,
        ),
        "sample_mask": torch.tensor([s.trainable for s in samples], dtype=torch.bool),
        "has_logprobs": torch.tensor(
            [s.trainable and s.logprobs is not None for s in samples], dtype=torch.bool
        ),
    }
    if device is not None:
        out = {name: tensor.to(device) for name, tensor in out.items()}
    return out


# ---------------------------------------------------------------------------------------
# Rollouts that overlap training


class GenerationCopy:
    """A `LivePolicy` over a copy of the trainer's model: rollouts sample from the copy
    while the trainer steps the original, and `sync()` copies the weights over.

    The copy is made once (`copy.deepcopy`, gradients off) on the original's device;
    `policy_options` go to `LivePolicy`. `sync()` waits for the batch in flight
    (`LivePolicy.updating()`), so no generation mixes two versions of the weights.
    """

    def __init__(self, model: Any, tokenizer: Any, **policy_options: Any) -> None:
        import copy

        from nemo_gym.models.policy import LivePolicy

        self.source = model
        self.model = copy.deepcopy(model)
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        self.model.eval()
        self.policy = LivePolicy(self.model, tokenizer, **policy_options)

    def sync(self) -> None:
        """Copy the trainer's current weights into the generation copy."""
        torch = _torch()
        with self.policy.updating(), torch.no_grad():
            self.model.load_state_dict(self.source.state_dict())

    async def aclose(self) -> None:
        await self.policy.aclose()


@dataclass(frozen=True, slots=True)
class Step:
    """The groups of one training step, all sampled by one version of the weights.

    `weights_version` is the pipeline's count of syncs when the step's generation
    started (every rollout's `metadata["weights_version"]` says the same);
    `staleness` is how many syncs happened between then and the hand-out, never more
    than the pipeline's `max_staleness`; `regenerated` counts the times the step was
    generated again because it was too stale. `generated` is the (start, end) of its
    generation, on `time.perf_counter()`'s clock.
    """

    index: int
    groups: list[list[Rollout]]
    weights_version: int
    staleness: int
    regenerated: int
    generated: tuple[float, float]

    def batch(self, **options: Any) -> TrainingBatch:
        """`build(self.groups, **options)`: the samples carry `weights_version`."""
        return build(self.groups, **options)


Play = Callable[[int, Any, int], Awaitable[list[list[Rollout]]]]
"""How `AsyncRollouts` generates one step: `play(index, batch, seed) -> groups`, where
`batch` is what `batches` yielded for step `index` and `seed` is the step's seed (the
same on every process, fresh for a regeneration). The default plays each task of the
batch `repeats` times as one group (`gym.groups`); `integrations.trl` plays a process's
slice of a distributed batch."""


class AsyncRollouts:
    """Rollouts for the next steps generate while the current step trains.

    ```python
    copy = training.GenerationCopy(model, tokenizer)
    pipeline = training.AsyncRollouts(env, copy.policy, batches, repeats=8,
                                      ahead=1, max_staleness=1, sync=copy.sync)
    for step in pipeline:                # step k; steps k+1..k+ahead are generating
        batch = step.batch()
        ...loss, backward, optimizer.step()...
        pipeline.sync()                  # the trainer picks the point: weights -> copy
    pipeline.close()
    ```

    `batches` yields each step's tasks (pulled lazily); each task runs `repeats` times
    as one group through `gym.groups` (or `play` generates the step from what `batches`
    yielded; see `Play`). Generation runs on a background event loop
    (`integrations.bridge.LoopThread`), from `policy`: a `GenerationCopy`'s policy, a
    `VLLM` engine or an HTTP server, whose weights the trainer moves with `sync`.

    - **Versions.** `sync()` waits for the generation in flight to finish, then runs
      the `sync` callable (the weight transfer) and counts one version. Generation
      never runs across a sync, so every group, and every step, comes from one version,
      recorded on each rollout (`metadata["weights_version"]`) and on the samples.
    - **Staleness.** A step is handed out at most `max_staleness` syncs after the
      weights that generated it. An older one is *regenerated* (dropped and sampled
      again from the current weights, with fresh seeds) rather than trained on, and
      `Step.regenerated` says so: dropping would skip its tasks and change the data
      order. `ahead` steps are prefetched; `ahead=0` is the synchronous loop.
    - **Behaviour logprobs** are on every sample (`TrainingSample.logprobs`): with
      staleness > 0 they come from older weights, so correct with the importance ratio
      `exp(logprob_now - logprob_behaviour)` (the example does).
    """

    def __init__(
        self,
        env: Environment,
        policy: Model,
        batches: Iterable[Any],  # each step's tasks, or (with `play`) what `play` takes
        *,
        repeats: int,
        ahead: int = 1,
        max_staleness: int = 1,
        sync: Callable[[], None] | None = None,
        harness: Harness | None = None,
        sampling: Sampling | None = None,
        seed: int = 0,
        concurrency: int | None = None,
        timeout: float | None = None,
        loop: LoopThread | None = None,
        play: Play | None = None,
    ) -> None:
        if ahead < 0:
            raise ConfigError(f"AsyncRollouts(ahead={ahead}): must be >= 0")
        if max_staleness < 0:
            raise ConfigError(f"AsyncRollouts(max_staleness={max_staleness}): must be >= 0")
        if ahead > max_staleness:
            raise ConfigError(
                f"AsyncRollouts(ahead={ahead}, max_staleness={max_staleness}): a step "
                f"prefetched {ahead} steps ahead is {ahead} syncs old when it is handed "
                "out, so every one would be regenerated; keep ahead <= max_staleness"
            )
        if repeats < 1:
            raise ConfigError(f"AsyncRollouts(repeats={repeats}): must be >= 1")
        from nemo_gym.integrations.bridge import shared_loop

        self.env, self.policy, self.repeats = env, policy, repeats
        self.ahead, self.max_staleness = ahead, max_staleness
        self.harness, self.sampling, self.seed = harness, sampling, seed
        self.concurrency, self.timeout = concurrency, timeout
        self._sync = sync
        self._play = play
        self._batches = iter(batches)
        self._loop = loop or shared_loop()
        self.version = 0
        """Syncs so far: the version of the weights new generation starts from."""
        self._next = 0  # the index of the next step to hand out
        self._queued = 0  # steps whose tasks were pulled from `batches`
        self._pending: dict[int, Any] = {}  # index -> concurrent Future of a Step
        self._tasks: dict[int, Any] = {}  # index -> what `batches` yielded for it
        self._exhausted = False
        self.regenerated = 0
        """Steps generated again because they were older than `max_staleness`."""

    # -- the trainer's side --------------------------------------------------------------

    def __iter__(self) -> Iterator[Step]:
        while True:
            step = self.next()
            if step is None:
                return
            yield step

    def next(self) -> Step | None:
        """Step `k`'s groups (generating them now if not prefetched), once they are
        within `max_staleness`; starts generating steps `k+1 .. k+ahead`. None when
        `batches` is exhausted."""
        index = self._next
        if not self._fill(index):
            return None
        step = self._pending.pop(index).result()
        attempts = 0
        while self.version - step.weights_version > self.max_staleness:
            attempts += 1
            self.regenerated += 1
            log.info(
                "step %d was generated %d syncs ago (max_staleness=%d): regenerating it",
                index,
                self.version - step.weights_version,
                self.max_staleness,
            )
            step = self._start(index, attempts).result()
        self._next += 1
        for ahead in range(1, self.ahead + 1):
            self._fill(index + ahead)
        self._tasks.pop(index, None)
        return replace(step, staleness=self.version - step.weights_version, regenerated=attempts)

    def sync(self) -> int:
        """Wait for the generation in flight, move the weights (the `sync` callable),
        and count a version. Returns the new version."""
        for future in list(self._pending.values()):
            future.result()
        if self._sync is not None:
            self._sync()
        self.version += 1
        return self.version

    def cancel(self) -> None:
        """Cancel prefetched generation (the environment stays open). Idempotent."""
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()

    def close(self) -> None:
        """Cancel prefetched generation and close the environment. Idempotent."""
        self.cancel()
        from nemo_gym.lifecycle import close_all

        self._loop.run(close_all(self.env, self.env.verifier, self.harness))

    # -- generation ------------------------------------------------------------------

    def _fill(self, index: int) -> bool:
        """Make sure step `index` is generating or generated; False past the end."""
        if index in self._pending:
            return True
        while self._queued <= index and not self._exhausted:
            tasks = next(self._batches, None)
            if tasks is None:
                self._exhausted = True
                break
            self._tasks[self._queued] = list(tasks) if self._play is None else tasks
            self._queued += 1
        if index not in self._tasks:
            return False
        self._pending[index] = self._start(index, 0)
        return True

    def _start(self, index: int, attempt: int) -> Any:
        coroutine = self._generate(index, self._tasks[index], self.version, attempt)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop.loop)

    async def _generate(self, index: int, tasks: Any, version: int, attempt: int) -> Step:
        from nemo_gym.runner import derive_seed

        started = time.perf_counter()
        seed = derive_seed(self.seed, f"async-step-{index}", attempt)
        if self._play is not None:
            found = await self._play(index, tasks, seed)
        else:
            found = await self._groups(tasks, seed)
        stamp = {"weights_version": version, "step": index}
        stamped = [
            [r.model_copy(update={"metadata": {**r.metadata, **stamp}}) for r in group]
            for group in found
        ]
        return Step(
            index=index,
            groups=stamped,
            weights_version=version,
            staleness=0,
            regenerated=0,
            generated=(started, time.perf_counter()),
        )

    async def _groups(self, tasks: list[Task], seed: int) -> list[list[Rollout]]:
        from nemo_gym.runner import groups

        order = {task.id: position for position, task in enumerate(tasks)}
        found: list[list[Rollout]] = []
        async for group in groups(
            self.env,
            self.policy,
            repeats=self.repeats,
            tasks=tasks,
            harness=self.harness,
            sampling=self.sampling,
            seed=seed,
            concurrency=self.concurrency or len(tasks) * self.repeats,
            timeout=self.timeout,
            keep_open=True,
        ):
            found.append(group)
        found.sort(key=lambda group: order[group[0].task_id])
        return found
