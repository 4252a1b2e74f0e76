"""The CLI reference page, generated from the parser: `python -m nemo_gym.cli.reference`.

`docs/cli.md` is this module's output; a test keeps the two in step, so the page never
names a flag the command does not have, or misses one it does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from nemo_gym.cli.main import (
    EXIT_FAILURES,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    build_parser,
)

__all__ = ["reference"]

_HEADER = f"""# `gym` command reference

Generated from the parser by `python -m nemo_gym.cli.reference > docs/cli.md` (a test
keeps it in step). Every command takes `--help`. For a guided tour from
`gym eval run` to the report, see [evaluation.md](evaluation.md).

## Exit status

- **{EXIT_OK}**: the command did what it was asked; for `gym eval run`, the run finished
  with its failures within bounds.
- **{EXIT_FAILURES}**: `gym eval run` finished, but every rollout failed, or more than
  `--max-failure-rate` of them. The summary and the run directory are written all the
  same; failures are counted over the whole run directory (a resumed run's earlier rows
  too), as the summary is.
- **{EXIT_USAGE}**: bad input (a flag, a file, a name); the message names the file, line
  and field, or the flag. Nothing ran.
- **{EXIT_INTERRUPTED}**: interrupted (Ctrl-C); `gym eval run` prints the command that
  resumes the run, with `--output DIR` added when the directory was the default.

`gym eval run` is greedy (temperature 0) unless given `--temperature`: an evaluation
scores the model's best guess, reproducibly. The Python API leaves sampling to the model
adapter unless given `sampling=` (`Local`: temperature 1.0, what a trainer samples at);
`gym.evaluate(env, model, sampling=gym.Sampling(temperature=0))` runs what the CLI runs.
"""


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _walk(
    parser: argparse.ArgumentParser, path: list[str]
) -> Iterator[tuple[list[str], argparse.ArgumentParser, str]]:
    sub = _subcommands(parser)
    if sub is None:
        return
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    for name, child in sub.choices.items():
        yield [*path, name], child, helps.get(name, "")
        yield from _walk(child, [*path, name])


def _metavar(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper()


def _usage(path: list[str], parser: argparse.ArgumentParser) -> str:
    parts = ["gym", *path]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            parts.append("COMMAND ...")
            continue
        if not action.option_strings:
            name = _metavar(action) if action.metavar else action.dest.upper()
            if action.nargs in ("*",):
                parts.append(f"[{name} ...]")
            elif action.nargs == "+":
                parts.append(f"{name} [{name} ...]")
            else:
                parts.append(name)
            continue
        flag = (
            action.option_strings[-1]
            if action.option_strings[-1].startswith("--")
            else (action.option_strings[0])
        )
        value = _metavar(action)
        shown = f"{flag} {value}".strip()
        parts.append(shown if action.required else f"[{shown}]")
    return " ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS) or action.required:
        return ""
    return f"`{action.default}`"


def _section(path: list[str], parser: argparse.ArgumentParser, summary: str) -> str:
    lines = [f"## `gym {' '.join(path)}`", ""]
    text = parser.description or summary
    if text:
        lines += [_cell(text), ""]
    lines += ["```", _usage(path, parser), "```", ""]
    sub = _subcommands(parser)
    if sub is not None:
        lines += ["| command | what it does |", "|---|---|"]
        for choice in sub._choices_actions:
            lines.append(f"| `gym {' '.join([*path, choice.dest])}` | {_cell(choice.help or '')} |")
        lines.append("")
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{_metavar(action)}`"
        value = _metavar(action) if action.option_strings else ""
        rows.append(
            f"| {names} | {f'`{value}`' if value else ''} | {_default(action)} | "
            f"{_cell(action.help or '')} |"
        )
    if rows:
        lines += ["| argument | value | default | meaning |", "|---|---|---|---|", *rows, ""]
    return "\n".join(lines)


def reference() -> str:
    """The Markdown reference of every `gym` command."""
    parser = build_parser()
    sections = [_HEADER, _section([], parser, parser.description or "")]
    sections[-1] = sections[-1].replace("## `gym `", "## `gym`")
    for path, child, summary in _walk(parser, []):
        sections.append(_section(path, child, summary))
    return "\n".join(sections).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
