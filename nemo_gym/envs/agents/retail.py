"""`retail`: a customer-service world in the tau-bench spirit: orders, a policy, tools."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Rewards, Task, ToolCall, Trajectory
from nemo_gym.tools import tool

POLICY = """You are a retail customer-service agent. Follow this policy:
- Look an order up with get_order before acting on it.
- Only a pending order may be cancelled, and only for the reason "no longer needed" or
  "ordered by mistake". A shipped or delivered order cannot be cancelled.
- Only items of a delivered order may be returned.
- If a request breaks the policy, do not act: explain why, politely.
Act through the tools; the database is what counts, not what you say."""
ITEMS = [
    ("mug", 12),
    ("lamp", 40),
    ("scarf", 25),
    ("kettle", 35),
    ("headphones", 90),
    ("notebook", 6),
    ("backpack", 55),
    ("chair", 120),
]
REASONS = ("no longer needed", "ordered by mistake")


class RetailEpisode(BasicEpisode):
    def __init__(self, orders: dict[str, Any]) -> None:
        self.state: dict[str, Any] = copy.deepcopy(orders)

        @tool
        async def get_order(order_id: str) -> dict[str, Any]:
            """An order's status and items."""
            return self._order(order_id)

        @tool
        async def cancel_order(order_id: str, reason: str) -> str:
            """Cancel an order, giving the customer's reason."""
            self._order(order_id)["status"] = "cancelled"
            self.state[order_id]["cancel_reason"] = reason
            return f"order {order_id} cancelled"

        @tool
        async def return_items(order_id: str, item_ids: list[str]) -> str:
            """Start the return of some items of an order."""
            order = self._order(order_id)
            unknown = sorted(set(item_ids) - {i["item_id"] for i in order["items"]})
            if unknown:
                raise ValueError(f"items {unknown} are not in order {order_id}")
            order["returned"] = sorted(set(order.get("returned", [])) | set(item_ids))
            return f"return started for {', '.join(item_ids)}"

        super().__init__([get_order, cancel_order, return_items], state=self.state)

    def _order(self, order_id: str) -> dict[str, Any]:
        if order_id not in self.state:
            raise KeyError(f"no order {order_id!r}")
        return self.state[order_id]


async def verify_orders(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the orders end exactly as the policy requires."""
    final = trajectory.final_state or {}
    ok = final == task.answer
    return Rewards(reward=float(ok), metadata={"final_state": final})


class Retail(ProceduralEnv):
    """Customers ask to cancel orders or return items; about half the requests break the
    policy (cancelling a shipped order, returning from an undelivered one) and must be
    refused. Verified on the final orders, not on the reply."""

    name = "retail"
    version = "1"
    domain = "agents"
    verification = "the orders' final state against the policy's outcome"

    def __init__(self, *, seed: int = 0, size: int = 1000, max_turns: int = 8) -> None:
        super().__init__(
            verify_orders,
            seed=seed,
            size=size,
            harness=ToolLoop(max_turns=max_turns, system_prompt=POLICY),
        )

    def draw(self, rng: random.Random) -> Task:
        orders: dict[str, Any] = {}
        for _ in range(3):
            oid = f"#W{rng.randint(1000, 9999)}"
            picked = rng.sample(ITEMS, 2)
            orders[oid] = {
                "status": rng.choice(("pending", "shipped", "delivered")),
                "items": [
                    {"item_id": f"{n}-{rng.randint(10, 99)}", "name": n, "price": p}
                    for n, p in picked
                ],
            }
        oid = rng.choice(sorted(orders))
        order, final = orders[oid], copy.deepcopy(orders)
        call: tuple[str, dict[str, Any]]  # the one tool call that solves the task
        if rng.random() < 0.5:
            reason = rng.choice(REASONS)
            request, call = (
                f"Please cancel order {oid}, it was {reason}.",
                ("cancel_order", {"order_id": oid, "reason": reason}),
            )
            if order["status"] == "pending":
                final[oid].update(status="cancelled", cancel_reason=reason)
        else:
            item = order["items"][0]
            request = f"I want to return the {item['name']} from order {oid}."
            call = ("return_items", {"order_id": oid, "item_ids": [item["item_id"]]})
            if order["status"] == "delivered":
                final[oid]["returned"] = [item["item_id"]]
        allowed = final != orders
        return Task(
            prompt=request,
            answer=final,
            metadata={"orders": orders, "order_id": oid, "call": call if allowed else None},
        )

    async def open(self, task: Task) -> RetailEpisode:
        return RetailEpisode(task.metadata["orders"])

    def oracle(self, task: Task) -> Turns:
        oid = task.metadata["order_id"]
        turns = [
            Message.assistant(
                tool_calls=(
                    ToolCall(id="c0", name="get_order", arguments=json.dumps({"order_id": oid})),
                )
            )
        ]
        if task.metadata["call"]:
            name, args = task.metadata["call"]
            turns.append(
                Message.assistant(
                    tool_calls=(ToolCall(id="c1", name=name, arguments=json.dumps(args)),)
                )
            )
            return [*turns, Message.assistant("All done.")]
        return [
            *turns,
            Message.assistant("I'm sorry, our policy does not allow that for this order."),
        ]

    def wrong(self, task: Task) -> Turns:
        oid = task.metadata["order_id"]
        call = ToolCall(
            id="c0", name="cancel_order", arguments=json.dumps({"order_id": oid, "reason": "other"})
        )
        return [Message.assistant(tool_calls=(call,)), Message.assistant("Done.")]
