"""Software-engineering tasks (SWE-bench and kin): a repository in a container, a
problem statement, and grading by the task's own tests in a fresh container.

See docs/swe.md.
"""

from nemo_gym.envs.swe.env import SWEEnv, SWEEpisode, SWEWorkspace, build_image, swe_reward
from nemo_gym.envs.swe.grading import GradeReport, Snapshot, grade, graded_tree, take
from nemo_gym.envs.swe.patch import PatchError, apply_patch, make_patch, parse_patch
from nemo_gym.envs.swe.rows import SWETask, load_rows, read_row

__all__ = [
    "GradeReport",
    "PatchError",
    "SWEEnv",
    "SWEEpisode",
    "SWETask",
    "SWEWorkspace",
    "Snapshot",
    "apply_patch",
    "build_image",
    "grade",
    "graded_tree",
    "load_rows",
    "make_patch",
    "parse_patch",
    "read_row",
    "swe_reward",
    "take",
]
