"""`blackjack`: hit or stand against a dealer who draws to 17, from a seeded deck."""

from __future__ import annotations

import random
import re

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import MultiStep
from nemo_gym.records import Message, Observation, Rewards, Task, Trajectory

RANKS = ("2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A")
RULES = (
    "Let's play blackjack. Get closer to 21 than the dealer without going over; the "
    "dealer draws to 17. Reply with <action>hit</action> or <action>stand</action>."
)
_ACTION = re.compile(r"<action>\s*(hit|stand)\s*</action>", re.IGNORECASE)


def value(hand: list[str]) -> int:
    total = sum(10 if r in "JQK" else 11 if r == "A" else int(r) for r in hand)
    aces = hand.count("A")
    while total > 21 and aces:
        total, aces = total - 10, aces - 1
    return total


def outcome(deck: list[str], hits: int) -> tuple[float, list[str], list[str]]:
    """(reward, player, dealer) when the player hits `hits` times, then stands."""
    player, dealer, rest = deck[0:2], deck[2:4], deck[4:]
    player = player + rest[:hits]
    rest = rest[hits:]
    if value(player) > 21:
        return -1.0, player, dealer
    while value(dealer) < 17:
        dealer, rest = dealer + rest[:1], rest[1:]
    p, d = value(player), value(dealer)
    return (1.0 if d > 21 or p > d else 0.0 if p == d else -1.0), player, dealer


class BlackjackEpisode(BasicEpisode):
    def __init__(self, deck: list[str]) -> None:
        super().__init__(state={"deck": deck, "hits": 0, "result": None})

    def show(self) -> str:
        player = self.state["deck"][:2] + self.state["deck"][4 : 4 + self.state["hits"]]
        dealer = self.state["deck"][2]
        return f"Your hand: {', '.join(player)} = {value(player)}. Dealer shows: {dealer}."

    async def step(self, action: str) -> Observation:
        match = _ACTION.findall(action)
        move = match[-1].lower() if match else "stand"  # NeMo Gym's reading: no tag is a stand
        if move == "hit":
            self.state["hits"] += 1
            reward, player, _ = outcome(self.state["deck"], self.state["hits"])
            if value(player) <= 21:
                return Observation(action=action, observation=self.show())
        reward, player, dealer = outcome(self.state["deck"], self.state["hits"])
        self.state["result"] = reward
        verdict = "win" if reward > 0 else "push" if reward == 0 else "lose"
        text = f"You {verdict}: {value(player)} against {value(dealer)}."
        return Observation(action=action, observation=text, reward=reward, terminated=True)


async def verify_hand(task: Task, trajectory: Trajectory) -> Rewards:
    """+1 for a win, 0 for a push, -1 for a loss (or a hand never finished)."""
    result = (trajectory.final_state or {}).get("result")
    return Rewards(
        reward=-1.0 if result is None else float(result),
        components={"finished": float(result is not None)},
    )


class Blackjack(ProceduralEnv):
    """One hand of blackjack from a seeded, shuffled deck; only deals that the player can
    win with the right choices are drawn, so the best play always scores +1."""

    name = "blackjack"
    version = "1"
    domain = "games"
    verification = "the hand's outcome: +1 win, 0 push, -1 loss"

    def __init__(self, *, seed: int = 0, size: int = 1000, max_steps: int = 12) -> None:
        super().__init__(verify_hand, seed=seed, size=size, harness=MultiStep(max_steps=max_steps))

    def draw(self, rng: random.Random) -> Task:
        while True:
            deck = [r for r in RANKS for _ in range(4)]
            rng.shuffle(deck)
            best = next((h for h in range(8) if outcome(deck, h)[0] == 1.0), None)
            if best is not None:
                break
        episode = BlackjackEpisode(deck)
        return Task(prompt=f"{RULES}\n\n{episode.show()}", answer=best, metadata={"deck": deck})

    def oracle_reward(self, task: Task) -> float:
        """The best outcome the deal allows (+1 for the deals this env draws)."""
        return outcome(task.metadata["deck"], int(task.answer))[0]

    async def open(self, task: Task) -> BlackjackEpisode:
        return BlackjackEpisode(list(task.metadata["deck"]))

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant("<action>hit</action>")] * int(task.answer) + [
            Message.assistant("<action>stand</action>")
        ]

    def wrong(self, task: Task) -> Turns:
        deck = task.metadata["deck"]
        bust = next(h for h in range(1, 12) if value(deck[:2] + deck[4 : 4 + h]) > 21)
        return [Message.assistant("<action>hit</action>")] * bust
