"""`OracleModel`: a model that plays an environment's oracle (or wrong) turns.

It answers each request with the next turn of `env.oracle(task)` for the task the
request belongs to, found by the task's opening messages, so one instance can serve a
whole run (`gym eval run ENV --model oracle` in the tests, `check_env`). Tasks that open
with the same messages are told apart by the turns already served; with such tasks,
run at concurrency 1 so their first requests arrive in task order.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence

from nemo_gym.errors import ModelError
from nemo_gym.protocols import Environment
from nemo_gym.records import Message, ModelRequest, ModelResponse, Task, Usage

__all__ = ["OracleModel", "turns_for"]


def turns_for(env: Environment, task: Task, *, wrong: bool = False) -> list[Message]:
    """The oracle (or wrong) turns of `task`; `ModelError` when the env has no oracle."""
    method = getattr(env, "wrong" if wrong else "oracle", None)
    turns = method(task) if callable(method) else None
    if turns is None:
        raise ModelError(f"{getattr(env, 'name', env)!r} has no oracle for task {task.id}")
    return list(turns)


def _key(messages: Sequence[Message]) -> str:
    return json.dumps([[m.role, m.content] for m in messages], ensure_ascii=False)


class OracleModel:
    """Replies with `env`'s oracle turns (`wrong=True`: its wrong turns) per task."""

    def __init__(
        self,
        env: Environment,
        tasks: Iterable[Task] | None = None,
        *,
        split: str = "test",
        limit: int | None = None,
        wrong: bool = False,
    ) -> None:
        self.env = env
        self.wrong = wrong
        self.tasks = list(tasks if tasks is not None else env.tasks(split=split, limit=limit))
        self._by_key: dict[str, list[Task]] = defaultdict(list)
        for task in self.tasks:
            self._by_key[_key(task.messages)].append(task)
        self._lengths = sorted({len(t.messages) for t in self.tasks}, reverse=True)
        self._waiting: dict[str, deque[Task]] = {}
        self._started: dict[tuple[str, str], Task] = {}
        self.requests = 0

    def _locate(self, messages: Sequence[Message]) -> tuple[Task, int, str]:
        for offset in (0, 1):
            for length in self._lengths:
                key = _key(messages[offset : offset + length])
                if key in self._by_key:
                    later = messages[offset + length :]
                    turn = sum(1 for m in later if m.role == "assistant")
                    return self._pick(key, later, turn), turn, key
        raise ModelError("OracleModel: the request belongs to none of its tasks")

    def _pick(self, key: str, later: Sequence[Message], turn: int) -> Task:
        candidates = self._by_key[key]
        if len(candidates) == 1:
            return candidates[0]
        if turn == 0:
            queue = self._waiting.setdefault(key, deque(candidates))
            if not queue:
                queue.extend(candidates)
            return queue.popleft()
        first = next(m for m in later if m.role == "assistant")
        found = self._started.get((key, _key([first])))
        if found is None:
            raise ModelError("OracleModel: cannot tell apart tasks that open alike")
        return found

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        task, turn, key = self._locate(request.messages)
        turns = turns_for(self.env, task, wrong=self.wrong)
        if turn >= len(turns):
            raise ModelError(f"OracleModel: task {task.id} has no turn {turn + 1}")
        message = turns[turn]
        if turn == 0 and len(self._by_key[key]) > 1:
            self._started[(key, _key([message]))] = task
        return ModelResponse(
            message=message,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            usage=Usage(completion_tokens=len((message.content or "").split())),
            model="oracle",
        )

    def __repr__(self) -> str:
        kind = "wrong" if self.wrong else "oracle"
        return f"OracleModel({getattr(self.env, 'name', '?')!r}, {kind}, {len(self.tasks)} tasks)"
