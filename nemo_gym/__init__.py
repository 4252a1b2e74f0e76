"""nemo_gym: reinforcement-learning environments for language models, in-process."""

from __future__ import annotations

from nemo_gym import errors
from nemo_gym.envs.base import BasicEpisode, Env
from nemo_gym.protocols import (
    Environment,
    Episode,
    Harness,
    Model,
    MultiStepEpisode,
    Sandbox,
    SandboxProvider,
    Verifier,
    as_verifier,
)
from nemo_gym.records import (
    ExecResult,
    Failure,
    Message,
    ModelCall,
    ModelRequest,
    ModelResponse,
    Observation,
    ResourceLimits,
    Rewards,
    Rollout,
    RunMetrics,
    Sampling,
    SandboxSpec,
    Task,
    TokenTrace,
    ToolCall,
    ToolResult,
    ToolSpec,
    Trajectory,
    Usage,
)
from nemo_gym.tools import Tool, tool

__version__ = "0.1.0"

__all__ = [
    "BasicEpisode",
    "Env",
    "Environment",
    "Episode",
    "ExecResult",
    "Failure",
    "Harness",
    "Message",
    "Model",
    "ModelCall",
    "ModelRequest",
    "ModelResponse",
    "MultiStepEpisode",
    "Observation",
    "ResourceLimits",
    "Rewards",
    "Rollout",
    "RunMetrics",
    "Sampling",
    "Sandbox",
    "SandboxProvider",
    "SandboxSpec",
    "Task",
    "TokenTrace",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Trajectory",
    "Usage",
    "Verifier",
    "as_verifier",
    "errors",
    "tool",
]
