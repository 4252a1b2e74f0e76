"""NeMo Gym's stateful tool-world servers (see `servers.py` for how a `Server` maps rows
to tasks), each with the environment that runs it. `servers.SERVERS` includes these."""

from __future__ import annotations

from nemo_gym.envs.rows import Row
from nemo_gym.interop.nemo_gym.servers import Server, row_task
from nemo_gym.records import Task

__all__ = ["WORLD_SERVERS"]


def _workplace(row: Row, server: str) -> Task:
    from nemo_gym.envs.tools.workplace_assistant import ground_truth

    return row_task(row, server, ground_truth=ground_truth(row))


def _injection(row: Row, server: str) -> Task:
    from nemo_gym.envs.safety.prompt_injection import injection_fields

    return row_task(row, server, **injection_fields(row))


def _terminal(row: Row, server: str) -> Task:
    from nemo_gym.envs.tools.terminal_action import terminal_fields

    return row_task(row, server, **terminal_fields(row))


def _mechanism(row: Row, server: str) -> Task:
    from nemo_gym.envs.knowledge.reaction_mechanism import mechanism_fields

    return row_task(row, server, **mechanism_fields(row))


WORLD_SERVERS: list[Server] = [
    Server("workplace_assistant", "workplace_assistant", _workplace),
    Server("indirect_prompt_injection", "prompt_injection", _injection),
    # Every harness's config in NeMo Gym sets string_similarity_threshold 0.9.
    Server("terminal_multi_harness", "terminal_action", _terminal),
    Server("fukuyamabench", "reaction_mechanism", _mechanism),
]
