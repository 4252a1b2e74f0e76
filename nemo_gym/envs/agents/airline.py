"""`airline`: reservations to change, cancel or add bags to, under an airline's policy."""

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

POLICY = """You are an airline reservation agent. Follow this policy:
- Look the reservation up with get_reservation before acting on it.
- A basic_economy reservation cannot be changed to another flight; economy and business
  can, to a flight with the same origin and destination (find it with search_flights).
- A reservation can be cancelled only in business class, or if it has travel insurance.
- At most 3 checked bags per passenger in total.
- If a request breaks the policy, do not act: explain why.
Act through the tools; the reservation database is what counts."""
CITIES = ("JFK", "LAX", "SFO", "ORD", "SEA", "BOS", "MIA", "DEN")


class AirlineEpisode(BasicEpisode):
    def __init__(self, world: dict[str, Any]) -> None:
        self.state: dict[str, Any] = copy.deepcopy(world["reservations"])
        flights = world["flights"]

        @tool
        async def get_reservation(reservation_id: str) -> dict[str, Any]:
            """A reservation: flight, cabin, passengers, bags, insurance, status."""
            return self._get(reservation_id)

        @tool
        async def search_flights(origin: str, destination: str, date: str) -> list[dict[str, Any]]:
            """Flights between two airports on a date (YYYY-MM-DD)."""
            return [
                {"flight_id": k, **v}
                for k, v in flights.items()
                if (v["origin"], v["destination"], v["date"]) == (origin, destination, date)
            ]

        @tool
        async def change_flight(reservation_id: str, flight_id: str) -> str:
            """Move a reservation to another flight."""
            if flight_id not in flights:
                raise KeyError(f"no flight {flight_id!r}")
            self._get(reservation_id)["flight_id"] = flight_id
            return "changed"

        @tool
        async def cancel_reservation(reservation_id: str) -> str:
            """Cancel a reservation."""
            self._get(reservation_id)["status"] = "cancelled"
            return "cancelled"

        @tool
        async def add_bags(reservation_id: str, count: int) -> str:
            """Add checked bags to a reservation."""
            self._get(reservation_id)["bags"] += count
            return f"bags: {self.state[reservation_id]['bags']}"

        super().__init__(
            [get_reservation, search_flights, change_flight, cancel_reservation, add_bags],
            state=self.state,
        )

    def _get(self, reservation_id: str) -> dict[str, Any]:
        if reservation_id not in self.state:
            raise KeyError(f"no reservation {reservation_id!r}")
        return self.state[reservation_id]


async def verify_reservations(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the reservations end exactly as the policy requires."""
    return Rewards(reward=float(trajectory.final_state == task.answer))


class Airline(ProceduralEnv):
    """Passengers ask to change a flight's date, cancel, or add bags; requests that break
    the policy must be refused. Verified on the final reservations."""

    name = "airline"
    version = "1"
    domain = "agents"
    verification = "the reservations' final state against the policy's outcome"

    def __init__(self, *, seed: int = 0, size: int = 1000, max_turns: int = 8) -> None:
        super().__init__(
            verify_reservations,
            seed=seed,
            size=size,
            harness=ToolLoop(max_turns=max_turns, system_prompt=POLICY),
        )

    def draw(self, rng: random.Random) -> Task:
        origin, destination = rng.sample(CITIES, 2)
        day, later = rng.randint(1, 20), rng.randint(21, 28)
        numbers = rng.sample(range(100, 1000), 2)
        flights = {
            f"HAT{n}": {"origin": origin, "destination": destination, "date": f"2025-06-{d:02d}"}
            for n, d in zip(numbers, (day, later), strict=True)
        }
        old, new = sorted(flights, key=lambda k: flights[k]["date"])
        rid = "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", k=6))
        res: dict[str, Any] = {
            "flight_id": old,
            "cabin": rng.choice(("basic_economy", "economy", "business")),
            "passengers": rng.randint(1, 2),
            "bags": rng.randint(0, 2),
            "insurance": rng.random() < 0.4,
            "status": "booked",
        }
        final = {rid: dict(res)}
        kind = rng.choice(("change", "cancel", "bags"))
        call: tuple[str, dict[str, Any]]  # the one tool call that solves the task
        if kind == "change":
            request = f"Move reservation {rid} to the flight on {flights[new]['date']}, please."
            call = ("change_flight", {"reservation_id": rid, "flight_id": new})
            final[rid]["flight_id"] = new if res["cabin"] != "basic_economy" else old
        elif kind == "cancel":
            request, call = (
                f"I need to cancel reservation {rid}.",
                ("cancel_reservation", {"reservation_id": rid}),
            )
            final[rid]["status"] = (
                "cancelled" if res["cabin"] == "business" or res["insurance"] else "booked"
            )
        else:
            count = rng.randint(1, 4)
            request, call = (
                f"Add {count} checked bags to reservation {rid}.",
                ("add_bags", {"reservation_id": rid, "count": count}),
            )
            if res["bags"] + count <= 3 * res["passengers"]:
                final[rid]["bags"] += count
        world = {"reservations": {rid: res}, "flights": flights}
        allowed = final[rid] != res
        return Task(
            prompt=request,
            answer=final,
            metadata={
                "world": world,
                "reservation_id": rid,
                "call": call if allowed else None,
                "route": [origin, destination, flights[new]["date"]],
            },
        )

    async def open(self, task: Task) -> AirlineEpisode:
        return AirlineEpisode(task.metadata["world"])

    def oracle(self, task: Task) -> Turns:
        rid, (origin, destination, date) = task.metadata["reservation_id"], task.metadata["route"]
        look = ToolCall(
            id="c0", name="get_reservation", arguments=json.dumps({"reservation_id": rid})
        )
        turns = [Message.assistant(tool_calls=(look,))]
        call = task.metadata["call"]
        if call and call[0] == "change_flight":
            search = {"origin": origin, "destination": destination, "date": date}
            turns.append(
                Message.assistant(
                    tool_calls=(
                        ToolCall(id="c1", name="search_flights", arguments=json.dumps(search)),
                    )
                )
            )
        if call:
            turns.append(
                Message.assistant(
                    tool_calls=(ToolCall(id="c2", name=call[0], arguments=json.dumps(call[1])),)
                )
            )
            return [*turns, Message.assistant("Done.")]
        return [*turns, Message.assistant("I'm sorry, the policy does not allow that.")]

    def wrong(self, task: Task) -> Turns:
        rid = task.metadata["reservation_id"]
        call = ToolCall(
            id="c0", name="add_bags", arguments=json.dumps({"reservation_id": rid, "count": 9})
        )
        return [Message.assistant(tool_calls=(call,)), Message.assistant("Done.")]
