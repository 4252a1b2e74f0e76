"""More NeMo Gym servers (see `servers.py` for how a `Server` maps rows to tasks): the
non-judge servers ported in the second round, each with the environment that scores it.
`servers.SERVERS` includes these."""

from __future__ import annotations

from nemo_gym.envs.rows import Row
from nemo_gym.interop.nemo_gym.servers import Server, row_task
from nemo_gym.records import Task

__all__ = ["EXTRA_SERVERS"]


def _next_action(row: Row, server: str) -> Task:
    from nemo_gym.envs.tools.next_action import expected_action

    return row_task(row, server, expected_action=expected_action(row))


def _multiverse_math(row: Row, server: str) -> Task:
    from nemo_gym.envs.tools.multiverse_math import ground_truth

    return row_task(row, server, ground_truth=ground_truth(row))


def _counter(row: Row, server: str) -> Task:
    return row_task(
        row,
        server,
        initial_count=row.require("initial_count", int),
        expected_count=row.require("expected_count", int),
    )


def _follow_ups(row: Row, server: str) -> Task:
    from nemo_gym.envs.knowledge.follow_ups import follow_ups

    return row_task(
        row, server, answer=row.require("expected_answer", str), follow_ups=follow_ups(row)
    )


def _weather_report(row: Row, server: str) -> Task:
    from nemo_gym.envs.tools.weather_report import expected_city

    return row_task(row, server, expected_city=expected_city(row))


def _citations(row: Row, server: str) -> Task:
    from nemo_gym.envs.instructions.citations import citation_check

    return row_task(row, server, verifier=citation_check(row))


def _ruler2(row: Row, server: str) -> Task:
    from nemo_gym.envs.long_context.ruler2 import ruler2_fields

    answer, metadata = ruler2_fields(row)
    return row_task(row, server, answer=answer, **metadata)


def _genrm(row: Row, server: str) -> Task:
    from nemo_gym.envs.knowledge.genrm import genrm_labels

    return row_task(row, server, labels=genrm_labels(row))


EXTRA_SERVERS: list[Server] = [
    Server(
        "single_step_tool_use_with_argument_comparison",
        "next_action",
        _next_action,
        # NeMo Gym's config: word_count_similarity_threshold 0.1, parallel rewarding off
        # (surplus calls free); ours counts calls (see DIFFERENCES), everything else the same.
        lambda rows: {"word_similarity": 0.1},
    ),
    Server("math_advanced_calculations", "multiverse_math", _multiverse_math),
    Server("example_session_state_mgmt", "counter", _counter),
    Server("example_multi_turn_gymnasium", "follow_ups", _follow_ups, episodes=True),
    Server("example_mcp_weather", "weather_report", _weather_report),
    Server("citation_if", "citations", _citations),
    Server("ruler2", "ruler2", _ruler2),
    Server("generative_reward_model", "genrm", _genrm),
]
