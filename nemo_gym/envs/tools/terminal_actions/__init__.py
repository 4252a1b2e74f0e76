"""NeMo Gym's terminal next-action comparator (`terminal_multi_harness`).

`verification_utils.py` and `response_utils.py` beside this one are NeMo Gym's own
(`resources_servers/terminal_multi_harness/common`, Apache-2.0): the action models, the
per-harness rulebooks of `ActionComparator` (codex, opencode, stirrup, agent006, generic),
and the reply-to-action reading. Kept as written apart from imports, annotations and one
fix: arguments that are not JSON are a non-match with their category (NeMo Gym's
comparator returns a result without `matches` there, and its verify fails).
"""
