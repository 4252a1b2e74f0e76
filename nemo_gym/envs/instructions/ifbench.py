"""`ifbench`: IFBench-style instructions: IF-RLVR's training constraints and more."""

from __future__ import annotations

from nemo_gym.envs.instructions.base import InstructionsEnv


class IFBench(InstructionsEnv):
    """Harder verifiable instructions beyond IFEval (first/last words, repeating the
    request, keyword counts, palindromes, stair indents, ...; see
    `nemo_gym.verify.ifeval.extended`), in IFEval's row layout.

    Ships 10 prompts written by us with references; `path=` reads IFBench / IF-RLVR
    rows whose instruction ids we check (an id we do not check is a verifier error).
    """

    name = "ifbench"
    version = "1"
    source = "10 prompts written by us; IFBench / IF-RLVR layout via path= or dataset="
    license = "Apache-2.0"
    sample = "instructions/data/ifbench.jsonl"
    public = "allenai/IFBench_test"
