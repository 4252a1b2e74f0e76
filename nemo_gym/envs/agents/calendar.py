"""`calendar`: schedule events under time constraints; the calendar must satisfy them all."""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import SingleTurn
from nemo_gym.limits import loads_json
from nemo_gym.records import Message, Rewards, Task, Trajectory
from nemo_gym.verify.common import response_text

SYSTEM = """You organise the user's calendar. Rules:
1. Print the calendar as a JSON list of events, each with "event_id" (integer),
   "event_name", "start_time" (24-hour HH:MM) and "duration" (minutes).
2. Honour every time constraint ("before 11am" means it ends by 11am, "after 2pm" that it
   starts at 2pm or later, "at 1pm" that it starts then).
3. Events must not overlap, and all must lie between 10:00 and 16:00.
4. Do not ask follow-up questions."""
_LIST = re.compile(r"\[[^\[\]]*\{[^\[\]]*\}[^\[\]]*\]", re.S)


def minutes(text: str) -> int:
    """'14:30', '2:30pm', '2pm', '12am' as minutes after midnight."""
    text = text.strip().lower()
    suffix = text[-2:] if text[-2:] in ("am", "pm") else ""
    hour, _, minute = text.removesuffix(suffix).partition(":")
    value = (int(hour) % 12 if suffix else int(hour)) * 60 + int(minute or 0)
    return value + (720 if suffix == "pm" else 0)


def satisfied(event: dict[str, Any], want: dict[str, Any]) -> bool:
    """Whether one scheduled event meets its expected duration, window and constraint."""
    start = minutes(str(event["start_time"]))
    end = start + int(event["duration"])
    if (
        int(event["duration"]) != want["duration"]
        or start < minutes(want["min_time"])
        or end > minutes(want["max_time"])
    ):
        return False
    kind, _, when = (want.get("constraint") or "").partition(" ")
    if kind == "before":
        return end <= minutes(when)
    if kind == "after":
        return start >= minutes(when)
    if kind == "at":
        return start == minutes(when)
    if kind == "between":
        low, high = when.split(" and ")
        return start >= minutes(low) and end <= minutes(high)
    return True


def check_calendar(reply: str, expected: dict[str, dict[str, Any]]) -> tuple[bool, str]:
    """(ok, why) for the last JSON list of events in `reply` against `expected`."""
    for found in reversed(_LIST.findall(reply)):
        try:
            events = loads_json(found)
            by_id = {str(e["event_id"]): e for e in events}
            spans = sorted(
                (minutes(str(e["start_time"])), minutes(str(e["start_time"])) + int(e["duration"]))
                for e in events
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if set(by_id) != set(expected) or len(by_id) != len(events):
            return False, "the events differ from the expected ones"
        if any(b[0] < a[1] for a, b in itertools.pairwise(spans)):
            return False, "events overlap"
        bad = [k for k, want in expected.items() if not satisfied(by_id[k], want)]
        return (not bad), f"constraints broken for events {bad}" if bad else "ok"
    return not expected, "no JSON list of events"


async def verify_calendar(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the reply's calendar has the expected events and meets every constraint."""
    ok, why = check_calendar(response_text(trajectory), task.answer)
    return Rewards(reward=float(ok), metadata={"reason": why})


def schedule(expected: dict[str, dict[str, Any]]) -> list[tuple[int, int, int]] | None:
    """A conflict-free (event_id, start, duration) plan meeting every constraint, by search."""
    events = sorted(expected.values(), key=lambda e: (e.get("constraint") is None, e["duration"]))
    plan: list[tuple[int, int, int]] = []

    def place(index: int) -> bool:
        if index == len(events):
            return True
        want = events[index]
        for start in range(
            minutes(want["min_time"]), minutes(want["max_time"]) - want["duration"] + 1, 5
        ):
            end = start + want["duration"]
            trial = {"start_time": f"{start // 60}:{start % 60:02d}", "duration": want["duration"]}
            if satisfied(trial, want) and all(end <= s or start >= s + d for _, s, d in plan):
                plan.append((int(want["event_id"]), start, want["duration"]))
                if place(index + 1):
                    return True
                plan.pop()
        return False

    return sorted(plan) if place(0) else None


def _clock(value: int) -> str:
    hour, minute = divmod(value, 60)
    return f"{(hour - 1) % 12 + 1}{f':{minute:02d}' if minute else ''}{'am' if hour < 12 else 'pm'}"


class Calendar(ProceduralEnv):
    """Two to five events with durations and constraints (before / after / at / between) to
    fit between 10:00 and 16:00 without overlaps; NeMo Gym's calendar rows (multi-turn,
    `exp_cal_state`) are scored by the same rules."""

    name = "calendar"
    version = "1"
    domain = "agents"
    verification = "every event's duration, window and constraint; no overlaps"

    def __init__(self, *, seed: int = 0, size: int = 1000, max_events: int = 5) -> None:
        super().__init__(
            verify_calendar, seed=seed, size=size, harness=SingleTurn(system_prompt=SYSTEM)
        )
        self.max_events = max_events

    def draw(self, rng: random.Random) -> Task:
        count = rng.randint(2, self.max_events)
        durations = [rng.choice((30, 45, 60, 90)) for _ in range(count)]
        while sum(durations) > 360:  # the day is 10:00-16:00
            durations[durations.index(max(durations))] -= 15
        gaps = [0] * (count + 1)
        for _ in range((360 - sum(durations)) // 15):  # the free quarter-hours, spread out
            gaps[rng.randrange(count + 1)] += 15
        start, plan = 600, []
        for index, duration in enumerate(durations):
            start += gaps[index]
            plan.append((index, start, duration))
            start += duration
        expected, lines = {}, []
        for index, begin, duration in plan:
            kind = rng.choice(("before", "after", "at", "between", None))
            constraint = {
                "before": f"before {_clock(begin + duration + 15)}",
                "after": f"after {_clock(begin)}",
                "at": f"at {_clock(begin)}",
                "between": f"between {_clock(begin)} and {_clock(begin + duration + 30)}",
                None: None,
            }[kind]
            expected[str(index)] = {
                "event_id": index,
                "duration": duration,
                "constraint": constraint,
                "min_time": "10:00",
                "max_time": "16:00",
            }
            lines.append(
                f"- event {index}: 'Meeting {index + 1}', {duration} minutes"
                + (f", {constraint}" if constraint else "")
            )
        prompt = "Please add these events to my calendar:\n" + "\n".join(lines)
        return Task(prompt=prompt, answer=expected, metadata={"plan": plan})

    def oracle(self, task: Task) -> Turns | None:
        plan = task.metadata.get("plan") or schedule(task.answer)
        if plan is None:
            return None
        events = [
            {
                "event_id": i,
                "event_name": f"Meeting {i + 1}",
                "start_time": f"{s // 60:02d}:{s % 60:02d}",
                "duration": d,
            }
            for i, s, d in plan
        ]
        return [Message.assistant(json.dumps(events))]

    def wrong(self, task: Task) -> Turns:
        events = [
            {
                "event_id": int(e["event_id"]),
                "event_name": "x",
                "start_time": "10:00",
                "duration": e["duration"],
            }
            for e in task.answer.values()
        ]
        if len(events) < 2:  # one event can't overlap: give it the wrong length instead
            events = [{**e, "duration": e["duration"] + 15} for e in events]
        return [Message.assistant(json.dumps(events))]
