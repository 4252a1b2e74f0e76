"""`sokoban`: push the boxes onto the targets, one move per turn, on a seeded board."""

from __future__ import annotations

import random
import re
from collections import deque

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import MultiStep
from nemo_gym.records import Message, Observation, Rewards, Task, Trajectory

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
RULES = (
    "Solve this Sokoban puzzle. Symbols: #=wall, _=floor, O=target, X=box, √=box on target, "
    "P=player, S=player on target. Push every box onto a target. Reply with one move per "
    "turn: <action>Up</action>, <action>Down</action>, <action>Left</action> or "
    "<action>Right</action>."
)
# A tagged move anywhere wins over a bare word, and 1-4 in the tag are Up, Down, Left,
# Right: NeMo Gym's grl_sokoban reads actions this way.
_TAGGED = re.compile(r"<action>\s*(up|down|left|right|[1-4])\s*</action>", re.I)
_WORD = re.compile(r"\b(up|down|left|right)\b", re.I)
_NUMBERED = dict(zip("1234", MOVES, strict=True))
Cell = tuple[int, int]


def push(
    walls: set[Cell], boxes: frozenset[Cell], player: Cell, move: str
) -> tuple[Cell, frozenset[Cell]]:
    """The player and boxes after one move (a blocked move changes nothing)."""
    dr, dc = MOVES[move]
    ahead = (player[0] + dr, player[1] + dc)
    if ahead in walls:
        return player, boxes
    if ahead in boxes:
        beyond = (ahead[0] + dr, ahead[1] + dc)
        if beyond in walls or beyond in boxes:
            return player, boxes
        return ahead, (boxes - {ahead}) | {beyond}
    return ahead, boxes


def solve(
    walls: set[Cell],
    targets: frozenset[Cell],
    boxes: frozenset[Cell],
    player: Cell,
    limit: int = 200_000,
) -> list[str] | None:
    """A shortest move sequence (breadth-first), or None."""
    start = (player, boxes)
    seen: dict[tuple[Cell, frozenset[Cell]], list[str]] = {start: []}
    queue = deque([start])
    while queue and len(seen) < limit:
        state = queue.popleft()
        if state[1] == targets:
            return seen[state]
        for move in MOVES:
            nxt = push(walls, state[1], state[0], move)
            if nxt not in seen:
                seen[nxt] = [*seen[state], move]
                queue.append(nxt)
    return None


def render(
    rows: int,
    cols: int,
    walls: set[Cell],
    targets: frozenset[Cell],
    boxes: frozenset[Cell],
    player: Cell,
) -> str:
    def cell(p: Cell) -> str:
        if p in walls:
            return "#"
        if p == player:
            return "S" if p in targets else "P"
        if p in boxes:
            return "√" if p in targets else "X"
        return "O" if p in targets else "_"

    return "\n".join("".join(cell((r, c)) for c in range(cols)) for r in range(rows))


class SokobanEpisode(BasicEpisode):
    def __init__(self, board: dict, observation: str = "board") -> None:
        self.observation = observation  # "grl": NeMo Gym's grl_sokoban text around the board
        self.rows, self.cols = board["rows"], board["cols"]
        self.walls = {tuple(w) for w in board["walls"]}
        self.targets = frozenset(tuple(t) for t in board["targets"])
        super().__init__(
            state={
                "player": tuple(board["player"]),
                "moves": 0,
                "score": 0.0,
                "boxes": sorted(tuple(b) for b in board["boxes"]),
            }
        )

    async def step(self, action: str) -> Observation:
        found = _TAGGED.search(action) or _WORD.search(action)
        move = _NUMBERED.get(found.group(1), found.group(1).lower()) if found else None
        if move is None:
            # gym-sokoban's no-op: a step, and its -0.1. Free no-ops would let a policy
            # stall at 0 where every real attempt costs moves.
            self.state.update(
                moves=self.state["moves"] + 1, score=round(self.state["score"] - 0.1, 6)
            )
            return Observation(
                action=action,
                observation="Reply with one move, e.g. <action>Up</action>.",
                reward=-0.1,
            )
        boxes = frozenset(self.state["boxes"])
        player, after = push(self.walls, boxes, self.state["player"], move)
        gained = len(after & self.targets) - len(boxes & self.targets)
        solved = after == self.targets
        reward = -0.1 + gained + (10.0 if solved else 0.0)  # gym-sokoban's step reward
        self.state.update(
            player=player,
            boxes=sorted(after),
            moves=self.state["moves"] + 1,
            score=round(self.state["score"] + reward, 6),
        )
        board = render(self.rows, self.cols, self.walls, self.targets, after, player)
        if self.observation == "grl":
            from nemo_gym.envs.games.grl_sokoban import frame

            board = frame(board, done=solved)
        return Observation(action=action, observation=board, reward=reward, terminated=solved)


async def verify_sokoban(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when every box is on a target; `scoring="gym_sokoban"`: the summed step rewards."""
    state = trajectory.final_state or {}
    targets = {tuple(t) for t in task.metadata["board"]["targets"]}
    on = sum(tuple(b) in targets for b in state.get("boxes", []))
    solved = float(on == len(targets))
    reward = state.get("score", 0.0) if task.metadata.get("scoring") == "gym_sokoban" else solved
    return Rewards(
        reward=reward,
        components={
            "solved": solved,
            "boxes_on_target": on / len(targets),
            "moves": float(state.get("moves", 0)),
        },
    )


class Sokoban(ProceduralEnv):
    """Boards generated by pulling boxes back from the targets (so all are solvable) and
    solved by search for the oracle; `scoring="gym_sokoban"` sums gym-sokoban's rewards
    (-0.1 a move, +1 a box on target, +10 solved) as NeMo Gym's grl_sokoban does."""

    name = "sokoban"
    version = "1"
    domain = "games"
    verification = "all boxes on targets in the final state (or gym-sokoban's summed reward)"

    def __init__(
        self,
        *,
        seed: int = 0,
        size: int = 1000,
        rows: int = 6,
        cols: int = 6,
        boxes: int = 1,
        max_steps: int = 40,
        scoring: str = "solved",
    ) -> None:
        if scoring not in ("solved", "gym_sokoban") or rows < 4 or cols < 4:
            raise ConfigError("sokoban: scoring is 'solved' or 'gym_sokoban'; rows, cols >= 4")
        super().__init__(
            verify_sokoban, seed=seed, size=size, harness=MultiStep(max_steps=max_steps)
        )
        self.rows, self.cols, self.boxes, self.scoring = rows, cols, boxes, scoring
        self.max_steps = max_steps

    def board(self, rng: random.Random) -> tuple[dict, list[str]]:
        inner = [(r, c) for r in range(1, self.rows - 1) for c in range(1, self.cols - 1)]
        while True:
            walls = {
                (r, c) for r in range(self.rows) for c in range(self.cols) if (r, c) not in inner
            }
            walls |= set(rng.sample(inner, rng.randint(0, len(inner) // 8)))
            free = [p for p in inner if p not in walls]
            targets = frozenset(rng.sample(free, self.boxes))
            boxes, player = set(targets), rng.choice([p for p in free if p not in targets])
            for _ in range(rng.randint(4, 30)):  # pull moves, the reverse of pushes
                dr, dc = MOVES[rng.choice(sorted(MOVES))]
                to, behind = (player[0] + dr, player[1] + dc), (player[0] - dr, player[1] - dc)
                if to in walls or to in boxes:
                    continue
                if behind in boxes:
                    boxes = (boxes - {behind}) | {player}
                player = to
            frozen = frozenset(boxes)
            plan = solve(walls, targets, frozen, player) if frozen != targets else None
            if plan and len(plan) <= self.max_steps // 2:
                board = {
                    "rows": self.rows,
                    "cols": self.cols,
                    "walls": sorted(walls),
                    "targets": sorted(targets),
                    "boxes": sorted(frozen),
                    "player": player,
                }
                return board, plan

    def draw(self, rng: random.Random) -> Task:
        board, plan = self.board(rng)
        picture = render(
            self.rows,
            self.cols,
            {tuple(w) for w in board["walls"]},
            frozenset(board["targets"]),
            frozenset(board["boxes"]),
            board["player"],
        )
        score = round(10.0 + self.boxes - 0.1 * len(plan), 6)
        return Task(
            prompt=f"{RULES}\n\n{picture}",
            answer=plan,
            metadata={"board": board, "scoring": self.scoring, "oracle_score": score},
        )

    async def open(self, task: Task) -> SokobanEpisode:
        return SokobanEpisode(task.metadata["board"], task.metadata.get("observation", "board"))

    def oracle_reward(self, task: Task) -> float:
        return task.metadata["oracle_score"] if task.metadata["scoring"] == "gym_sokoban" else 1.0

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(f"<action>{m.title()}</action>") for m in task.answer]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("I am still thinking about it.")] * self.max_steps
