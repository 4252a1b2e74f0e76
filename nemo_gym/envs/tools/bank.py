"""`bank`: a stateful tool world. Verified on the accounts' final balances, not the reply."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Rewards, Task, ToolCall, Trajectory
from nemo_gym.tools import tool

SYSTEM = (
    "You are a bank assistant. Use the tools to carry out the customer's request, "
    "then confirm briefly. Amounts are in whole dollars."
)
ACCOUNTS = ("checking", "savings", "travel")


def _operations(rng: random.Random, balances: dict[str, int]) -> Iterator[tuple[str, dict]]:
    """Valid operations (never overdrawing), applied to `balances` as they are made.

    Yields (the customer's words, the tool call that carries it out).
    """
    for _ in range(rng.randint(1, 3)):
        source, target = rng.sample(ACCOUNTS, 2)
        amount = rng.randint(1, max(1, balances[source] // 2))
        kind = rng.choice(("transfer", "deposit", "withdraw"))
        if kind == "transfer":
            balances[source] -= amount
            balances[target] += amount
            arguments = {"from_account": source, "to_account": target, "amount": amount}
            yield (
                f"move ${amount} from {source} to {target}",
                {"name": kind, "arguments": arguments},
            )
        elif kind == "deposit":
            balances[target] += amount
            arguments = {"account": target, "amount": amount}
            yield f"deposit ${amount} into {target}", {"name": kind, "arguments": arguments}
        else:
            balances[source] -= amount
            arguments = {"account": source, "amount": amount}
            yield f"withdraw ${amount} from {source}", {"name": kind, "arguments": arguments}


class BankEpisode(BasicEpisode):
    def __init__(self, balances: dict[str, int]) -> None:
        self.state: dict[str, int] = dict(balances)

        @tool
        async def get_balance(account: str) -> int:
            """The balance of an account (checking, savings or travel)."""
            return self.state[self._known(account)]

        @tool
        async def transfer(from_account: str, to_account: str, amount: int) -> str:
            """Move money between two accounts."""
            self._known(to_account)
            self._take(from_account, amount)
            self.state[to_account] += amount
            return f"ok: {from_account}={self.state[from_account]}, {to_account}={self.state[to_account]}"  # noqa: E501

        @tool
        async def deposit(account: str, amount: int) -> str:
            """Deposit cash into an account."""
            self.state[self._known(account)] += self._positive(amount)
            return f"ok: {account}={self.state[account]}"

        @tool
        async def withdraw(account: str, amount: int) -> str:
            """Withdraw cash from an account."""
            self._take(account, amount)
            return f"ok: {account}={self.state[account]}"

        super().__init__([get_balance, transfer, deposit, withdraw], state=self.state)

    def _known(self, account: str) -> str:
        if account not in self.state:
            raise KeyError(f"no account {account!r}; accounts: {', '.join(self.state)}")
        return account

    @staticmethod
    def _positive(amount: int) -> int:
        if amount <= 0:
            raise ValueError("amount must be positive")
        return amount

    def _take(self, account: str, amount: int) -> None:
        if self.state[self._known(account)] < self._positive(amount):
            raise ValueError(f"insufficient funds in {account}")
        self.state[account] -= amount


async def verify_balances(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when every account ends at the expected balance; `accounts` is the fraction right."""
    final = trajectory.final_state or {}
    expected = task.answer
    right = sum(final.get(name) == value for name, value in expected.items())
    return Rewards(
        reward=float(right == len(expected)),
        components={"accounts": right / len(expected)},
        metadata={"final_state": final},
    )


class Bank(ProceduralEnv):
    """Customers ask for 1-3 transfers, deposits or withdrawals; tasks are seeded."""

    name = "bank"
    version = "2"
    domain = "tools"
    verification = "final balances of the stateful world"

    def __init__(self, *, seed: int = 0, size: int = 1000, max_turns: int = 8):
        super().__init__(
            verify_balances,
            seed=seed,
            size=size,
            harness=ToolLoop(max_turns=max_turns, system_prompt=SYSTEM),
        )

    def draw(self, rng: random.Random) -> Task:
        start = {name: rng.randint(50, 500) for name in ACCOUNTS}
        final = dict(start)
        operations = list(_operations(rng, final))
        calls = [call for _, call in operations]
        return Task(
            prompt="Please " + ", then ".join(text for text, _ in operations) + ".",
            answer=final,
            metadata={"initial_balances": start, "calls": calls},
        )

    async def open(self, task: Task) -> BankEpisode:
        return BankEpisode(task.metadata["initial_balances"])

    def oracle(self, task: Task) -> Turns:
        turns = [
            Message.assistant(
                tool_calls=(
                    ToolCall(id=f"call_{i}", name=c["name"], arguments=json.dumps(c["arguments"])),
                )
            )
            for i, c in enumerate(task.metadata["calls"])
        ]
        return [*turns, Message.assistant("Done: everything you asked for is carried out.")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("Done: everything you asked for is carried out.")]
