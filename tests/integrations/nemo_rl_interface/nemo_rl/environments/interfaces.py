"""NeMo RL's environment interface, restated (see ../../README.md)."""

import abc
from typing import Any, Generic, NamedTuple, TypeVar

MetadataT = TypeVar("MetadataT")


class EnvironmentReturn(NamedTuple, Generic[MetadataT]):
    observations: list[dict[str, str]]
    metadata: list[MetadataT]
    next_stop_strings: list[list[str] | None] | list[None]
    rewards: Any  # Tensor[B], or {name: Tensor[B]}
    terminateds: Any  # Tensor[B]
    answers: list[str | None] | None


class EnvironmentInterface(abc.ABC, Generic[MetadataT]):
    @abc.abstractmethod
    def step(self, message_log_batch: list, metadata: list[MetadataT]) -> EnvironmentReturn:
        """One turn for a batch of message logs."""

    @abc.abstractmethod
    def global_post_process_and_metrics(self, batch: Any) -> tuple[Any, dict]:
        """Post-process a finished batch and report metrics."""
