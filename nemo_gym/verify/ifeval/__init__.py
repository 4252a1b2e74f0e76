"""IFEval instruction following: the 25 checkers of Google's IFEval, strict and loose.

```python
from nemo_gym.verify.ifeval import IFEvalVerifier, ifeval_metrics, score_response

score = score_response("hello there", ["change_case:english_lowercase"], [{}])
verifier = IFEvalVerifier(mode="strict", reward="prompt")
```

See docs/verify-ifeval.md. `langdetect` (extra "ifeval") is imported only when a
language instruction is checked.
"""

from nemo_gym.verify.ifeval.registry import (
    EXTENDED_INSTRUCTIONS,
    INSTRUCTIONS,
    Instruction,
    InstructionSpec,
    Param,
    make_instruction,
)
from nemo_gym.verify.ifeval.scoring import (
    IFEvalScore,
    InstructionResult,
    build_instructions,
    loose_variants,
    score_instructions,
    score_response,
)
from nemo_gym.verify.ifeval.verifier import IFEvalVerifier, ifeval_metrics, ifeval_task

__all__ = [
    "EXTENDED_INSTRUCTIONS",
    "INSTRUCTIONS",
    "IFEvalScore",
    "IFEvalVerifier",
    "Instruction",
    "InstructionResult",
    "InstructionSpec",
    "Param",
    "build_instructions",
    "ifeval_metrics",
    "ifeval_task",
    "loose_variants",
    "make_instruction",
    "score_instructions",
    "score_response",
]
