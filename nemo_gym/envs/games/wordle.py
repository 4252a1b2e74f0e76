"""`wordle`: find a five-letter word in six guesses, told which letters are green or yellow."""

from __future__ import annotations

import json
import random
import re
from functools import cache
from importlib import resources
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import MultiStep, ToolLoop
from nemo_gym.records import Message, Observation, Rewards, Task, ToolCall, Trajectory
from nemo_gym.tools import tool

RULES = (
    "Let's play Wordle. Guess the secret five-letter English word in at most {turns} guesses. "
    "After each guess you get one mark per letter: G (right letter, right place), Y (in the "
    "word, elsewhere), _ (not in the word). "
)
TEXT = "Reply with your guess as <guess>word</guess>."
TOOLS = "Use submit_guess to guess; check_word_validity and get_game_state may help."
_GUESS = re.compile(r"<guess>\s*([A-Za-z]+)\s*</guess>|\b([A-Za-z]{5})\b")


WORD_LISTS = {"scowl": "words5.txt", "enable": "enable5.txt"}
"""The accepted guesses: our SCOWL list (the default), or ENABLE's five-letter words, the
list NeMo Gym's wordle accepts."""


@cache
def words(guesses: str = "scowl") -> tuple[str, ...]:
    path = f"games/data/{WORD_LISTS[guesses]}"
    text = resources.files("nemo_gym.envs").joinpath(path).read_text("utf-8")
    lines = (line.strip() for line in text.splitlines() if not line.startswith("#"))
    return tuple(w for w in lines if len(w) == 5 and w.isalpha())


def feedback(guess: str, target: str) -> str:
    """G / Y / _ per letter, repeated letters counted as Wordle does."""
    marks, left = ["_"] * len(target), list(target)
    for i, (g, t) in enumerate(zip(guess, target, strict=True)):
        if g == t:
            marks[i], left[i] = "G", ""
    for i, g in enumerate(guess):
        if marks[i] == "_" and g in left:
            marks[i], left[left.index(g)] = "Y", ""
    return "".join(marks)


class WordleEpisode(BasicEpisode):
    """The game; driven by `step` (text guesses) or by the tools (NeMo Gym's interface)."""

    def __init__(self, target: str, max_turns: int, guesses: str = "scowl") -> None:
        self.target, self.max_turns = target, max_turns
        self.valid = set(words(guesses)) | {target}

        @tool
        async def submit_guess(guess: str) -> dict[str, Any]:
            """Guess the secret word; returns the feedback marks."""
            return self.guess(guess)

        @tool
        async def check_word_validity(word: str) -> dict[str, Any]:
            """Whether a word is an accepted five-letter guess."""
            return {"valid": word.lower().strip() in self.valid}

        @tool
        async def get_game_state() -> dict[str, Any]:
            """The guesses and marks so far."""
            return {k: self.state[k] for k in ("guesses", "marks", "won", "turns_left")}

        super().__init__(
            [submit_guess, check_word_validity, get_game_state],
            state={"guesses": [], "marks": [], "invalid": 0, "won": False, "turns_left": max_turns},
        )

    def guess(self, word: str) -> dict[str, Any]:
        if self.state["won"] or self.state["turns_left"] <= 0:
            return {"error": "the game is over", "won": self.state["won"]}
        word = word.lower().strip()
        self.state["turns_left"] -= 1
        if len(word) != len(self.target) or word not in self.valid:
            self.state["invalid"] += 1
            return {
                "valid": False,
                "error": f"{word!r} is not an accepted {len(self.target)}-letter word",
                "turns_left": self.state["turns_left"],
            }
        marks = feedback(word, self.target)
        self.state["guesses"].append(word)
        self.state["marks"].append(marks)
        self.state["won"] = word == self.target
        return {
            "valid": True,
            "feedback": marks,
            "won": self.state["won"],
            "turns_left": self.state["turns_left"],
        }

    async def step(self, action: str) -> Observation:
        found = _GUESS.findall(action)
        word = next((a or b for a, b in reversed(found)), "")
        result = self.guess(word)
        done = self.state["won"] or self.state["turns_left"] <= 0
        text = (
            "Correct!" if self.state["won"] else result.get("feedback") or result.get("error", "")
        )
        return Observation(
            action=action,
            observation=f"{word}: {text}",
            terminated=done,
            reward=float(self.state["won"]),
        )


def nemo_gym_penalties(guesses: list[str], marks: list[str]) -> float:
    """NeMo Gym's per-guess penalties for the guesses before the last: a repeated guess
    -0.2, each known green letter not kept -0.05, no known yellow letter used -0.03,
    each eliminated letter used -0.02."""
    total = 0.0
    greens: dict[int, str] = {}
    yellows: set[str] = set()
    gone: set[str] = set()
    for index, (guess, mark) in enumerate(zip(guesses, marks, strict=True)):
        if guess in guesses[:index]:
            total -= 0.2
        total -= 0.05 * sum(1 for pos, letter in greens.items() if guess[pos] != letter)
        if yellows and not any(letter in guess for letter in yellows):
            total -= 0.03
        total -= 0.02 * sum(1 for letter in guess if letter in gone)
        for pos, (m, letter) in enumerate(zip(mark, guess, strict=True)):
            if m == "G":
                greens[pos] = letter
            elif m == "Y":
                yellows.add(letter)
        gone |= {
            c
            for m, c in zip(mark, guess, strict=True)
            if m == "_" and c not in greens.values() and c not in yellows
        }
    return total


async def verify_wordle(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 for a win (default); NeMo Gym's scoring: 2.0 - 0.2 per extra turn (a win in
    one counts as three) plus its per-guess penalties, at least 0.1 for a win, 0 for a loss."""
    state = trajectory.final_state or {}
    turns = task.metadata["max_turns"] - state.get("turns_left", 0)
    won = bool(state.get("won"))
    if task.metadata.get("scoring") == "nemo_gym":
        guesses, marks = state.get("guesses", []), state.get("marks", [])
        penalty = nemo_gym_penalties(guesses[:-1], marks[:-1]) - 0.02 * state.get("invalid", 0)
        win = 2.0 - 0.2 * ((3 if turns == 1 else turns) - 1)
        reward = max(win + penalty, 0.1) if won else 0.0
    else:
        reward = float(won)
    return Rewards(
        reward=reward,
        components={"won": float(won), "turns": float(turns)},
        metadata={"guesses": state.get("guesses", [])},
    )


class Wordle(ProceduralEnv):
    """Wordle with a seeded secret from 4,600 SCOWL words; guesses in text (`interface=
    "text"`, the Gymnasium-style loop) or through tools (`interface="tools"`, NeMo Gym's
    wordle). `scoring="nemo_gym"` rewards fewer turns as NeMo Gym does; `guesses="enable"`
    accepts the guesses NeMo Gym accepts (ENABLE's five-letter words); `model_turns` bounds
    the tool loop's model turns (default twice `max_turns`)."""

    name = "wordle"
    version = "1"
    domain = "games"
    verification = "the secret word found within the turn budget (final state)"
    license = "Apache-2.0; word list from SCOWL (permissive, see words5.txt)"

    def __init__(
        self,
        *,
        seed: int = 0,
        size: int = 1000,
        max_turns: int = 6,
        interface: str = "text",
        scoring: str = "win",
        guesses: str = "scowl",
        model_turns: int | None = None,
    ) -> None:
        if interface not in ("text", "tools") or scoring not in ("win", "nemo_gym"):
            raise ConfigError("wordle: interface is 'text' or 'tools', scoring 'win' or 'nemo_gym'")
        if guesses not in WORD_LISTS:
            raise ConfigError(f"wordle: guesses is one of {', '.join(WORD_LISTS)}")
        harness = (
            MultiStep(max_steps=max_turns)
            if interface == "text"
            else ToolLoop(max_turns=model_turns or max_turns * 2)
        )
        super().__init__(verify_wordle, seed=seed, size=size, harness=harness)
        self.max_turns, self.interface, self.scoring = max_turns, interface, scoring
        self.guesses = guesses
        self.max_reward = 1.8 if scoring == "nemo_gym" else 1.0  # type: ignore[misc]

    def draw(self, rng: random.Random) -> Task:
        target = rng.choice(words(self.guesses))
        rules = RULES.format(turns=self.max_turns) + (TEXT if self.interface == "text" else TOOLS)
        return Task(
            prompt=rules,
            answer=target,
            metadata={
                "max_turns": self.max_turns,
                "scoring": self.scoring,
                "guesses": self.guesses,
            },
        )

    def content(self, task: Task) -> str:
        return str(task.answer)

    async def open(self, task: Task) -> WordleEpisode:
        return WordleEpisode(
            str(task.answer),
            int(task.metadata["max_turns"]),
            str(task.metadata.get("guesses", "scowl")),
        )

    def oracle_reward(self, task: Task) -> float:
        return 1.6 if task.metadata.get("scoring") == "nemo_gym" else 1.0

    def _play(self, word: str) -> list[Message]:
        if self.interface == "text":
            return [Message.assistant(f"<guess>{word}</guess>")]
        call = ToolCall(id=f"g-{word}", name="submit_guess", arguments=json.dumps({"guess": word}))
        return [Message.assistant(tool_calls=(call,))]

    def oracle(self, task: Task) -> Turns:
        return self._play(str(task.answer)) + (
            [] if self.interface == "text" else [Message.assistant("Solved.")]
        )

    def wrong(self, task: Task) -> Turns:
        miss = next(w for w in words(self.guesses) if not set(w) & set(str(task.answer)))
        turns = [m for _ in range(self.max_turns) for m in self._play(miss)]
        return turns + ([] if self.interface == "text" else [Message.assistant("I give up.")])
