"""`tetris`: steer falling pieces (Left, Right, Down) until a row is cleared."""

from __future__ import annotations

import random
import re
from collections import deque

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import MultiStep
from nemo_gym.records import Message, Observation, Rewards, Task, Trajectory

SHAPES = {"I": ((0, 0), (0, -1)), "-": ((0, 0), (-1, 0)), "O": ((0, 0), (-1, 0), (0, -1), (-1, -1))}
RULES = (
    "Play Tetris until you clear a row. Symbols: _=empty, #=settled block, X=falling piece. "
    "A piece moves only when you say so and settles as soon as it cannot fall further. Reply "
    "with one or more moves: <action>Left</action>, <action>Right</action>, <action>Down</action>."
)
_ACTION = re.compile(r"<action>\s*(left|right|down)\s*</action>", re.IGNORECASE)
Cell = tuple[int, int]


class Game:
    """Width x height board (y grows downward); pieces spawn at the top from `pieces`."""

    def __init__(self, width: int, height: int, pieces: list[tuple[str, int]]) -> None:
        self.width, self.height, self.pieces = width, height, pieces

    def cells(self, piece: int, anchor: Cell) -> list[Cell]:
        return [(anchor[0] + dx, anchor[1] + dy) for dx, dy in SHAPES[self.pieces[piece][0]]]

    def blocked(self, board: frozenset[Cell], piece: int, anchor: Cell) -> bool:
        return any(
            x < 0 or x >= self.width or y >= self.height or (x, y) in board
            for x, y in self.cells(piece, anchor)
            if y >= 0 or x < 0 or x >= self.width
        )

    def act(self, state: tuple, move: str) -> tuple[tuple, int, bool]:
        """(next state, rows cleared, game over) after one move."""
        board, piece, anchor = state
        dx, dy = {"left": (-1, 0), "right": (1, 0), "down": (0, 1)}[move]
        moved = (anchor[0] + dx, anchor[1] + dy)
        if not self.blocked(board, piece, moved):
            anchor = moved
        if not self.blocked(board, piece, (anchor[0], anchor[1] + 1)):
            return (board, piece, anchor), 0, False
        board = board | {c for c in self.cells(piece, anchor) if c[1] >= 0}
        full = [y for y in range(self.height) if all((x, y) in board for x in range(self.width))]
        board = frozenset((x, y + sum(1 for f in full if f > y)) for x, y in board if y not in full)
        over = any(y == 0 for _, y in board) or piece + 1 >= len(self.pieces)
        return (
            (board, piece + 1, (self.pieces[min(piece + 1, len(self.pieces) - 1)][1], 0)),
            len(full),
            over and not full,
        )

    def start(self) -> tuple:
        return (frozenset(), 0, (self.pieces[0][1], 0))

    def render(self, state: tuple) -> str:
        board, piece, anchor = state
        falling = set(self.cells(piece, anchor))
        return "\n".join(
            "".join(
                "X" if (x, y) in falling else "#" if (x, y) in board else "_"
                for x in range(self.width)
            )
            for y in range(self.height)
        )

    def solve(self, limit: int = 50_000) -> list[str] | None:
        seen: dict[tuple, list[str]] = {self.start(): []}
        queue = deque([self.start()])
        while queue and len(seen) < limit:
            state = queue.popleft()
            for move in ("down", "left", "right"):
                nxt, cleared, over = self.act(state, move)
                if cleared:
                    return [*seen[state], move]
                if not over and nxt not in seen:
                    seen[nxt] = [*seen[state], move]
                    queue.append(nxt)
        return None


class TetrisEpisode(BasicEpisode):
    def __init__(self, game: Game) -> None:
        self.game = game
        super().__init__(state={"moves": 0, "cleared": 0, "over": False, "score": 0.0})
        self.position = game.start()

    async def step(self, action: str) -> Observation:
        moves = [m.lower() for m in _ACTION.findall(action)]
        if not moves:
            return Observation(
                action=action, observation="Reply with moves such as <action>Down</action>."
            )
        reward = 0.0
        for move in moves:
            self.position, cleared, over = self.game.act(self.position, move)
            reward += -0.1 + 10 * cleared  # GRL's tetris reward
            self.state.update(
                moves=self.state["moves"] + 1, cleared=self.state["cleared"] + cleared, over=over
            )
            if cleared or over:
                break
        self.state["score"] = round(self.state["score"] + reward, 6)
        done = bool(self.state["cleared"] or self.state["over"])
        return Observation(
            action=action,
            observation=self.game.render(self.position),
            reward=reward,
            terminated=done,
        )


async def verify_tetris(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when a row was cleared; `scoring="grl"`: GRL's summed reward (-0.1 a move, +10 a row)."""
    state = trajectory.final_state or {}
    cleared = float(state.get("cleared", 0) > 0)
    reward = state.get("score", 0.0) if task.metadata.get("scoring") == "grl" else cleared
    return Rewards(
        reward=reward, components={"cleared": cleared, "moves": float(state.get("moves", 0))}
    )


class Tetris(ProceduralEnv):
    """A small board (4 x 4 by default, as in GRL) with a seeded sequence of I, - and O
    pieces; only sequences where a row can be cleared are drawn (the oracle's search)."""

    name = "tetris"
    version = "1"
    domain = "games"
    verification = "a row cleared before the game ends (or GRL's summed reward)"

    def __init__(
        self,
        *,
        seed: int = 0,
        size: int = 1000,
        width: int = 4,
        height: int = 4,
        max_steps: int = 20,
        scoring: str = "cleared",
    ) -> None:
        if scoring not in ("cleared", "grl") or width < 2 or height < 3:
            raise ConfigError("tetris: scoring is 'cleared' or 'grl'; width >= 2, height >= 3")
        super().__init__(
            verify_tetris, seed=seed, size=size, harness=MultiStep(max_steps=max_steps)
        )
        self.width, self.height, self.scoring, self.max_steps = width, height, scoring, max_steps

    def draw(self, rng: random.Random) -> Task:
        while True:
            names = [rng.choice(sorted(SHAPES)) for _ in range(self.width * self.height)]
            pieces = [(n, rng.randint(1 if n in ("-", "O") else 0, self.width - 1)) for n in names]
            game = Game(self.width, self.height, pieces)
            plan = game.solve()
            if plan:
                break
        state, score = game.start(), 0.0
        for move in plan:
            state, cleared, _ = game.act(state, move)
            score += -0.1 + 10 * cleared
        prompt = f"{RULES}\n\n{game.render(game.start())}"
        return Task(
            prompt=prompt,
            answer=plan,
            metadata={
                "pieces": pieces,
                "width": self.width,
                "height": self.height,
                "scoring": self.scoring,
                "oracle_score": round(score, 6),
            },
        )

    def content(self, task: Task) -> str:
        return repr(task.metadata["pieces"])

    async def open(self, task: Task) -> TetrisEpisode:
        md = task.metadata
        return TetrisEpisode(Game(md["width"], md["height"], [tuple(p) for p in md["pieces"]]))

    def oracle_reward(self, task: Task) -> float:
        return task.metadata["oracle_score"] if task.metadata["scoring"] == "grl" else 1.0

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant("".join(f"<action>{m.title()}</action>" for m in task.answer))]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("Let me look at the board first.")] * self.max_steps
