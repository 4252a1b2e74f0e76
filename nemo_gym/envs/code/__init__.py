"""Code environments: programs run against tests in a sandbox.

`code` (our problems, APPS / LiveCodeBench datasets), `humaneval`, `mbpp` and
`livecodebench` all score with `nemo_gym.verify.code.CodeVerifier`.
"""

from nemo_gym.envs.code.programs import SYSTEM, CodeEnv

__all__ = ["SYSTEM", "CodeEnv"]
