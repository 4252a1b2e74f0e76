"""`tool_chain`: look several values up with one tool, then report them with another."""

from __future__ import annotations

import json
import random

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Rewards, Task, ToolCall, Trajectory
from nemo_gym.tools import tool

TERMS = {
    "Hot": ["Blazing", "Warm", "Scorching"],
    "Cold": ["Frosty", "Chilly", "Icy"],
    "Fast": ["Brisk", "Rapid", "Swift"],
    "Slow": ["Leisurely", "Sluggish"],
    "Happy": ["Cheerful", "Joyful", "Content"],
    "Sad": ["Unhappy", "Gloomy", "Heartbroken"],
    "Big": ["Huge", "Vast", "Massive"],
    "Small": ["Tiny", "Little", "Minute"],
    "Bright": ["Radiant", "Vivid"],
    "Dark": ["Dusky", "Murky", "Dim"],
    "Old": ["Ancient", "Historic"],
    "New": ["Fresh", "Modern", "Novel"],
    "Quiet": ["Hushed", "Silent"],
    "Loud": ["Noisy", "Booming", "Deafening"],
}
SYSTEM = (
    "You are an extraction agent. Use get_synonym_value to get the value of every synonym "
    "of each term the user asks about, then call extract_synonym_values once with all the "
    "values, in the order the synonyms are listed below.\n\n# Available synonyms\n"
)


def synonym_value(synonym: str) -> int:
    """The value get_synonym_value returns: the sum of the synonym's character codes."""
    return sum(map(ord, synonym))


class ToolChainEpisode(BasicEpisode):
    def __init__(self) -> None:
        @tool
        async def get_synonym_value(synonym: str) -> int:
            """The value of a synonym."""
            return synonym_value(synonym)

        @tool
        async def extract_synonym_values(synonym_values: list[int]) -> str:
            """Report the synonym values, in order. Call once, at the end."""
            self.state["reported"].append(list(synonym_values))
            return "recorded"

        super().__init__([get_synonym_value, extract_synonym_values], state={"reported": []})


async def verify_reported(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the last reported list is exactly the expected values in order;
    `overlap` is the share of expected values reported in any order."""
    reported = (trajectory.final_state or {}).get("reported") or [[]]
    last, expected = reported[-1], task.answer
    overlap = len(set(last) & set(expected)) / len(expected)
    return Rewards(
        reward=float(last == expected),
        components={"overlap": overlap},
        metadata={"extracted_answer": last},
    )


class ToolChain(ProceduralEnv):
    """Multi-step tool use: one lookup call per synonym of the asked terms, then one report
    call with all values in order; verified on what was reported (the episode's state).
    """

    name = "tool_chain"
    version = "1"
    domain = "tools"
    verification = "the reported values, in order, from the episode's final state"

    def __init__(self, *, seed: int = 0, size: int = 1000, max_turns: int = 16) -> None:
        super().__init__(
            verify_reported, seed=seed, size=size, harness=ToolLoop(max_turns=max_turns)
        )

    def draw(self, rng: random.Random) -> Task:
        terms = rng.sample(sorted(TERMS), 6)
        listing = [(t, s) for t in terms for s in TERMS[t]]
        rng.shuffle(listing)
        asked = rng.sample(terms, rng.randint(1, 2))
        wanted = [s for t, s in listing if t in asked]
        lines = "\n".join(f"The term '{t}' has a synonym '{s}'." for t, s in listing)
        return Task(
            messages=(
                Message.system(SYSTEM + lines),
                Message.user(f"Get the values for the synonyms of: {', '.join(asked)}."),
            ),
            answer=[synonym_value(s) for s in wanted],
            metadata={"synonyms": wanted},
        )

    async def open(self, task: Task) -> ToolChainEpisode:
        return ToolChainEpisode()

    def oracle(self, task: Task) -> Turns:
        lookups = tuple(
            ToolCall(id=f"call_{i}", name="get_synonym_value", arguments=json.dumps({"synonym": s}))
            for i, s in enumerate(task.metadata["synonyms"])
        )
        report = ToolCall(
            id="call_report",
            name="extract_synonym_values",
            arguments=json.dumps({"synonym_values": task.answer}),
        )
        return [
            Message.assistant(tool_calls=lookups),
            Message.assistant(tool_calls=(report,)),
            Message.assistant("Done."),
        ]

    def wrong(self, task: Task) -> Turns:
        report = ToolCall(
            id="call_report",
            name="extract_synonym_values",
            arguments=json.dumps({"synonym_values": [*reversed(task.answer), 1]}),
        )
        return [Message.assistant(tool_calls=(report,)), Message.assistant("Done.")]
