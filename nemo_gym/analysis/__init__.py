"""Looking at runs: profiles, failure diagnostics, paired comparisons, the HTML report.

Everything here reads a run directory's rows and nothing else, so a report can be made
on any machine from the files alone.
"""

from __future__ import annotations

from nemo_gym.analysis.compare import Paired, bootstrap_interval, compare, sign_test, task_scores
from nemo_gym.analysis.diagnose import CLASSES, Diagnosis, classify, diagnose
from nemo_gym.analysis.profile import Profile, profile
from nemo_gym.analysis.report import render, write_report

__all__ = [
    "CLASSES",
    "Diagnosis",
    "Paired",
    "Profile",
    "bootstrap_interval",
    "classify",
    "compare",
    "diagnose",
    "profile",
    "render",
    "sign_test",
    "task_scores",
    "write_report",
]
