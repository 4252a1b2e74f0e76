"""NeMo Gym's `grl_sokoban` boards: the same board from the same row seed.

A port of NeMo Gym 0.7.0's `resources_servers/grl_sokoban/sokoban_env/generation.py`
(Apache-2.0, Copyright (c) 2025 NVIDIA CORPORATION; itself adapted from gym-sokoban, MIT,
and GRL/lmenv). NeMo Gym seeds Python's and NumPy's global generators with the row's
`seed` and calls `generate_room`; here the same two generators are private instances
seeded the same way, so the draws, and so the board, are identical without touching
global state. Each random call below is kept in NeMo Gym's order: reordering one
changes every board.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from typing import Any

__all__ = ["board_from_seed", "frame"]

# gym-sokoban's cell codes.
WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER = 0, 1, 2, 3, 4, 5
CHANGE_COORDINATES = {0: (-1, 0), 1: (1, 0), 2: (0, -1), 3: (0, 1)}
MASKS = [
    [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
    [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
    [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
]
DIRECTIONS = [(1, 0), (0, 1), (-1, 0), (0, -1)]


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as exc:  # pragma: no cover - numpy comes with every RL stack
        raise ImportError(
            "NeMo Gym's Sokoban boards need numpy: pip install numpy (or nemo-gym[cli])"
        ) from exc
    return numpy


def _topology(rng: random.Random, dim: tuple[int, int], p_change: float, steps: int) -> Any:
    np = _numpy()
    dim_x, dim_y = dim
    direction = rng.sample(DIRECTIONS, 1)[0]
    position = np.array([rng.randint(1, dim_x - 1), rng.randint(1, dim_y - 1)])
    level = np.zeros(dim, dtype=int)
    for _ in range(steps):
        if rng.random() < p_change:
            direction = rng.sample(DIRECTIONS, 1)[0]
        position = position + direction
        position[0] = max(min(position[0], dim_x - 2), 1)
        position[1] = max(min(position[1], dim_y - 2), 1)
        mask = rng.sample(MASKS, 1)[0]
        start = position - 1
        level[start[0] : start[0] + 3, start[1] : start[1] + 3] += mask
    level[level > 0] = 1
    level[:, [0, dim_y - 1]] = 0
    level[[0, dim_x - 1], :] = 0
    return level


def _place(nrng: Any, room: Any, num_boxes: int) -> Any:
    np = _numpy()
    free = np.where(room == FLOOR)
    if free[0].shape[0] <= num_boxes + 1:
        raise RuntimeError(f"not enough free cells for a player and {num_boxes} boxes")
    ind = nrng.randint(free[0].shape[0])
    room[free[0][ind], free[1][ind]] = PLAYER
    for _ in range(num_boxes):
        free = np.where(room == FLOOR)
        ind = nrng.randint(free[0].shape[0])
        room[free[0][ind], free[1][ind]] = TARGET
    return room


def _displacement(mapping: dict[tuple[int, int], tuple[int, int]]) -> int:
    return sum(abs(a[0] - b[0]) + abs(a[1] - b[1]) for a, b in mapping.items())


def _reverse_move(
    state: Any,
    structure: Any,
    mapping: dict[tuple[int, int], tuple[int, int]],
    last_pull: tuple[int, int],
    action: int,
) -> tuple[Any, dict[tuple[int, int], tuple[int, int]], tuple[int, int]]:
    np = _numpy()
    where = np.where(state == PLAYER)
    player = np.array([where[0][0], where[1][0]])
    change = CHANGE_COORDINATES[action % 4]
    nxt = player + change
    if state[nxt[0], nxt[1]] in (FLOOR, TARGET):
        state[player[0], player[1]] = structure[player[0], player[1]]
        state[nxt[0], nxt[1]] = PLAYER
        behind = (player[0] - change[0], player[1] - change[1])
        if state[behind[0], behind[1]] in (BOX_ON_TARGET, BOX):
            state[player[0], player[1]] = BOX_ON_TARGET
            state[behind[0], behind[1]] = structure[behind[0], behind[1]]
            for key in list(mapping):
                if mapping[key] == (behind[0], behind[1]):
                    mapping[key] = (player[0], player[1])
                    last_pull = key
    return state, mapping, last_pull


def _reverse_playing(state: Any, structure: Any, search_depth: int) -> tuple[Any, dict]:
    np = _numpy()
    where = np.where(structure == TARGET)
    mapping = {(where[0][i], where[1][i]): (where[0][i], where[1][i]) for i in range(len(where[0]))}
    num_boxes = len(mapping)
    explored: set[bytes] = set()
    best_score, best_room, best_mapping = -1, state.copy(), dict(mapping)
    stack: deque = deque([(state.copy(), dict(mapping), 0, (-1, -1), search_depth)])
    while stack:  # depth-first, as NeMo Gym's (the order decides which board wins ties)
        room, boxes, swaps, last_pull, ttl = stack.pop()
        ttl -= 1
        if ttl <= 0 or len(explored) >= 300000:
            continue
        key = room.tobytes()
        if key in explored:
            continue
        score = swaps * _displacement(boxes)
        if np.where(room == TARGET)[0].shape[0] != num_boxes:
            score = 0
        if score > best_score:
            best_room, best_score, best_mapping = room.copy(), score, dict(boxes)
        explored.add(key)
        for action in range(4):
            nxt, moved, pull = _reverse_move(room.copy(), structure, dict(boxes), last_pull, action)
            stack.append((nxt, moved, swaps + (pull != last_pull), pull, ttl))
    return best_room, best_mapping


def _wander(rng: random.Random, state: Any, structure: Any, probability: float) -> Any:
    np = _numpy()
    if rng.random() > probability:
        return state
    where = np.where(state == PLAYER)
    player = np.array([where[0][0], where[1][0]])
    seen, steps = [tuple(player)], 0
    while steps < 3:
        moves = []
        for action in range(4):
            nxt = player + CHANGE_COORDINATES[action]
            if state[nxt[0], nxt[1]] in (FLOOR, TARGET) and tuple(nxt) not in seen:
                moves.append(nxt)
        if not moves:
            break
        nxt = rng.choice(moves)
        state[player[0], player[1]] = structure[player[0], player[1]]
        state[nxt[0], nxt[1]] = PLAYER
        player = nxt
        seen.append(tuple(player))
        steps += 1
        if steps >= 3 or rng.random() > 0.5:
            break
    return state


def _generate(
    rng: random.Random, nrng: Any, dim: tuple[int, int], num_boxes: int, search_depth: int
) -> tuple[Any, Any]:
    """NeMo Gym's `generate_room` (gym-sokoban's `num_gen_steps`, 4 tries)."""
    steps = int(1.7 * (dim[0] + dim[1]))
    mapping: dict = {}
    for _ in range(4):
        room = _place(nrng, _topology(rng, dim, 0.35, steps), num_boxes)
        structure = room.copy()
        structure[structure == PLAYER] = FLOOR
        state = room.copy()
        state[state == TARGET] = BOX
        state, mapping = _reverse_playing(state, structure, search_depth)
        state[state == BOX_ON_TARGET] = BOX
        if _displacement(mapping) > 0:
            break
    if _displacement(mapping) == 0:
        raise RuntimeError("every try left the boxes on their targets")
    state = _wander(rng, state, structure, 0.8 if _displacement(mapping) == 1 else 0.5)
    return structure, state


def board_from_seed(
    seed: int, dim_room: tuple[int, int], num_boxes: int, search_depth: int = 100
) -> dict[str, Any]:
    """The board NeMo Gym's `grl_sokoban` deals for a row with this `seed`, `dim_room` and
    `num_boxes`, as the `sokoban` environment's board (walls, targets, boxes, player).

    When generation fails NeMo Gym retries with `hash(str(seed))`, which Python randomises
    per process (so NeMo Gym's own board is not reproducible then); here the retry seed
    comes from SHA-256 of the seed instead.
    """
    np = _numpy()
    dim = (int(dim_room[0]), int(dim_room[1]))
    for _ in range(100):
        try:
            structure, state = _generate(
                random.Random(seed), np.random.RandomState(seed), dim, num_boxes, search_depth
            )
            break
        except (RuntimeError, RuntimeWarning, ValueError):
            seed = int(hashlib.sha256(str(seed).encode()).hexdigest()[:8], 16)
    else:  # pragma: no cover - only for a room too small to hold the boxes
        raise ValueError(f"no {dim} Sokoban board with {num_boxes} boxes")

    def cells(grid: Any, *codes: int) -> list[tuple[int, int]]:
        return sorted(
            (int(r), int(c)) for r, c in zip(*np.where(np.isin(grid, codes)), strict=True)
        )

    return {
        "rows": dim[0],
        "cols": dim[1],
        "walls": cells(structure, WALL),
        "targets": cells(structure, TARGET),
        "boxes": cells(state, BOX, BOX_ON_TARGET),
        "player": cells(state, PLAYER)[0],
    }


def frame(board: str, done: bool) -> str:
    """NeMo Gym's observation text: the board with its legend, the bare board at the end."""
    if done:
        return board
    return (
        f"Sokoban board:\n{board}\n\n"
        "Legend: #=wall, _=floor, O=target, X=box, √=box on target, P=player, S=player on "
        "target.\nRespond with exactly one move using <action>Up</action>, "
        "<action>Down</action>, <action>Left</action>, or <action>Right</action>."
    )
