"""`ifeval`: prompts with Google IFEval's 25 kinds of verifiable instructions."""

from __future__ import annotations

from nemo_gym.envs.instructions.base import InstructionsEnv


class IFEval(InstructionsEnv):
    """IFEval layout (key, prompt, instruction_id_list, kwargs); strict or loose scoring.

    Ships 10 prompts written by us, each with a following and a violating reference
    response; `dataset="google/IFEval"` reads the benchmark (no references: no oracle).
    """

    name = "ifeval"
    version = "1"
    source = "10 prompts written by us; IFEval layout (google/IFEval) via dataset= or path="
    license = "Apache-2.0 (sample); IFEval is Apache-2.0"
    sample = "instructions/data/ifeval.jsonl"
    public = "google/IFEval"
