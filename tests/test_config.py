"""Config files: errors name file, line and field; the line finders agree with the parsers."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.config import (
    build_model,
    build_parts,
    iter_locs,
    load_config,
    toml_line,
    weighted_limits,
    yaml_lines,
)
from nemo_gym.errors import ConfigError

GOOD = """\
seed = 1
repeats = 2
limit = 4

[model]
name = "scripted"
options = { replies = ["\\\\boxed{4}"], cycle = true }

[[envs]]
name = "arithmetic"
options = { seed = 3 }

[[envs]]
name = "arithmetic_small"
limit = 2
"""


def write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path, build: bool = False) -> str:
    with pytest.raises(ConfigError) as info:
        config, source = load_config(path)
        if build:
            build_parts(config, source)
            build_model(config.model, source)
    return str(info.value)


def test_a_good_config_builds_its_parts(tmp_path: Path) -> None:
    config, source = load_config(write(tmp_path, GOOD))
    parts = build_parts(config, source)
    assert [(p.env.name, p.limit) for p in parts] == [("arithmetic", 4), ("arithmetic_small", 2)]
    assert parts[0].env.to_spec().options == {"seed": 3}
    assert {p.sampling.temperature for p in parts} == {0.0}  # greedy unless set
    assert config.repeats == 2 and config.seed == 1


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # an unknown field
        (("limit = 2\n", "limt = 2\n"), r"run.toml:15: field 'envs\[1\].limt': unknown field"),
        (("repeats = 2", "repeat = 2"), r"run.toml:2: field 'repeat': unknown field"),
        # a bad value
        (
            ("repeats = 2", "repeats = 0"),
            r"run.toml:2: field 'repeats': .*greater than or equal to 1",
        ),
        (("limit = 2\n", 'limit = "two"\n'), r"run.toml:15: field 'envs\[1\].limit': .*integer"),
        (("seed = 1", "seed = 1.5"), r"run.toml:1: field 'seed'"),
        # a missing field: the line of its table
        (('name = "arithmetic_small"\n', ""), r"run.toml:13: field 'envs\[1\].name': missing"),
        # not TOML at all
        (("seed = 1", "seed = = 1"), r"run.toml:1: not valid TOML"),
    ],
)
def test_config_errors_name_file_line_and_field(
    tmp_path: Path, change: tuple[str, str], expected: str
) -> None:
    old, new = change
    assert old in GOOD
    assert re.search(expected, error_of(write(tmp_path, GOOD.replace(old, new, 1))))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            (' "arithmetic_small"', ' "nope"'),
            r":14: field 'envs\[1\].name': no environment named 'nope'",
        ),
        (
            ("{ seed = 3 }", "{ sed = 3 }"),
            r":11: field 'envs\[0\].options.sed': .*unexpected keyword",
        ),
        (('name = "scripted"', 'name = "nope"'), r":6: field 'model.name': no model named 'nope'"),
    ],
)
def test_names_and_options_are_checked_against_the_registry(
    tmp_path: Path, change: tuple[str, str], expected: str
) -> None:
    text = GOOD.replace(*change, 1)
    assert re.search(expected, error_of(write(tmp_path, text), build=True))


def test_yaml_errors_name_the_line_too(tmp_path: Path) -> None:
    text = """\
seed: 1
model:
  name: scripted
  options: {replies: ["4"], cycle: true}
envs:
  - name: arithmetic
  - name: arithmetic_small
    limit: -1
variants:
  - name: a
    sampling: {temprature: 0.5}
"""
    message = error_of(write(tmp_path, text, "run.yaml"))
    assert (
        "run.yaml:8: field 'envs[1].limit': Input should be greater than or equal to 0" in message
    )
    assert "run.yaml:11: field 'variants[0].sampling.temprature': unknown field" in message
    broken = write(tmp_path, "seed: 1\nenvs: [arithmetic\n", "bad.yaml")
    assert re.search(r"bad.yaml:\d+: not valid YAML", error_of(broken))


def test_an_api_key_is_never_in_a_config_and_comes_from_a_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = GOOD.replace("cycle = true }", 'cycle = true, api_key = "sk" }')
    assert "run.toml:7: field 'model.options': an API key is never written in a config" in error_of(
        write(tmp_path, secret)
    )
    text = GOOD.replace('name = "scripted"', 'name = "openai"\napi_key_env = "GYM_TEST_NO_KEY"')
    text = text.replace(
        'options = { replies = ["\\\\boxed{4}"], cycle = true }', 'options = { model = "m" }'
    )
    monkeypatch.delenv("GYM_TEST_NO_KEY", raising=False)
    path = write(tmp_path, text)
    config, source = load_config(path)
    with pytest.raises(
        ConfigError, match=r"run.toml:7: field 'model.api_key_env': the environment"
    ):
        build_model(config.model, source)
    monkeypatch.setenv("GYM_TEST_NO_KEY", "sk-from-env")
    model = build_model(config.model, source)
    assert "sk-from-env" not in gym.registry.spec_of(model, "model").model_dump_json()


def test_weights_share_the_total_limit(tmp_path: Path) -> None:
    assert weighted_limits(10, [1, 1, 1]) == [4, 3, 3]
    assert weighted_limits(100, [1, 3]) == [25, 75]
    assert sum(weighted_limits(7, [0.2, 0.5, 0.3])) == 7
    text = GOOD.replace("options = { seed = 3 }", "options = { seed = 3 }\nweight = 3").replace(
        "limit = 2\n", "weight = 1\n"
    )
    config, source = load_config(write(tmp_path, text))
    assert [p.limit for p in build_parts(config, source)] == [3, 1]
    no_total = text.replace("limit = 4\n", "")
    assert re.search(
        r"run.toml:11: field 'envs\[0\].weight': weights share the run's total `limit`",
        error_of(write(tmp_path, no_total), build=True),
    )
    both = text.replace("weight = 1\n", "weight = 1\nlimit = 2\n")
    assert "field 'envs[1].limit': give a limit or a weight, not both" in error_of(
        write(tmp_path, both), build=True
    )


def test_variants_change_the_harness_sampling_and_env_options(tmp_path: Path) -> None:
    text = (
        GOOD
        + """
[[variants]]
name = "base"

[[variants]]
name = "terse"
system_prompt = "Number only."
sampling = { temperature = 0.7 }

[[variants]]
name = "bigger"
env_options = { max_value = 1000 }
"""
    )
    config, source = load_config(write(tmp_path, text))
    parts = build_parts(config, source)
    assert [(p.env.name, p.variant) for p in parts][:3] == [
        ("arithmetic", "base"),
        ("arithmetic", "terse"),
        ("arithmetic", "bigger"),
    ]
    base, terse, bigger = parts[:3]
    assert base.harness is None and base.sampling.temperature == 0.0
    assert terse.harness.system_prompt == "Number only." and terse.sampling.temperature == 0.7
    assert bigger.env.to_spec().options == {"seed": 3, "max_value": 1000}
    bad = text.replace('name = "bigger"', 'name = "bad name"')
    assert "field 'variants[2].name': use letters, digits" in error_of(write(tmp_path, bad))


# ----------------------------------------------------------------- the line finders

KEYS = st.text(string.ascii_lowercase + "_", min_size=1, max_size=6)
SCALARS = st.one_of(
    st.integers(-1000, 1000),
    st.booleans(),
    st.text(string.ascii_letters + string.digits + " -_.:", max_size=10),
)
LEAVES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))
TABLES = st.recursive(
    st.dictionaries(KEYS, LEAVES, max_size=3),
    lambda inner: st.dictionaries(
        KEYS, st.one_of(LEAVES, inner, st.lists(inner, min_size=1, max_size=2)), max_size=3
    ),
    max_leaves=12,
)


def _toml_value(value: Any, multiline: bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        items = [_toml_value(v, False) for v in value]
        return (
            "[\n  " + ",\n  ".join(items) + ",\n]"
            if multiline and items
            else f"[{', '.join(items)}]"
        )
    return json.dumps(value)


def _is_tables(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def to_toml(data: dict[str, Any], prefix: tuple[str, ...] = (), *, flip: bool = False) -> str:
    """TOML for `data`: scalars as `key = value` (lists across lines every other time),
    tables as [a.b], lists of tables as [[a.b]], with comments and blank lines between."""
    out = []
    for index, (key, value) in enumerate(data.items()):
        if not isinstance(value, dict) and not _is_tables(value):
            out.append(f"{key} = {_toml_value(value, flip and index % 2 == 0)}\n")
    for key, value in data.items():
        here = (*prefix, key)
        if isinstance(value, dict):
            out.append(f"\n# the table {key}\n[{'.'.join(here)}]\n")
            out.append(to_toml(value, here, flip=not flip))
        elif _is_tables(value):
            for item in value:
                out.append(f"\n[[{'.'.join(here)}]]\n")
                out.append(to_toml(item, here, flip=not flip))
    return "".join(out)


def _paths_with_keys(data: Any) -> list[tuple[Any, ...]]:
    return [loc for loc in iter_locs(data) if isinstance(loc[-1], str)]


@settings(max_examples=60, deadline=None)
@given(TABLES)
def test_toml_line_points_at_the_statement_of_every_key(data: dict[str, Any]) -> None:
    text = to_toml(data)
    import tomllib

    assert tomllib.loads(text) == data
    lines = text.splitlines()
    for loc in _paths_with_keys(data):
        number = toml_line(text, loc)
        assert number is not None, loc
        line = lines[number - 1]
        key = loc[-1]
        assert re.match(rf"^{key} = ", line) or re.search(rf"[.\[]{key}\]+$", line), (loc, line)


@settings(max_examples=60, deadline=None)
@given(TABLES)
def test_yaml_lines_point_at_every_key(data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data, sort_keys=False)
    assert yaml.safe_load(text) == data
    found = yaml_lines(text)
    lines = text.splitlines()
    for loc in _paths_with_keys(data):
        line = lines[found[loc] - 1]
        assert re.match(rf"^[\s-]*'?{loc[-1]}'?:", line), (loc, line)


def test_the_config_page_names_every_field_and_its_examples_load(tmp_path: Path) -> None:
    from nemo_gym.config import EnvTable, HarnessChange, ModelTable, RunConfig, VariantTable

    docs = Path(__file__).parents[1] / "docs"
    text = (docs / "config.md").read_text()
    spans = set(re.findall(r"`([^`]*)`", text))
    for table in (RunConfig, EnvTable, ModelTable, VariantTable, HarnessChange):
        missing = [name for name in table.model_fields if name not in spans]
        assert not missing, f"docs/config.md does not name {table.__name__} fields {missing}"
    blocks = re.findall(r"```(toml|yaml)\n(.*?)```", text, re.S)
    assert [kind for kind, _ in blocks] == ["toml", "yaml"]
    loaded = []
    for kind, block in blocks:
        config, source = load_config(write(tmp_path, block, f"example.{kind}"))
        loaded.append(config)
        parts = build_parts(config, source)
        assert [(p.env.name, p.variant, p.limit) for p in parts] == [
            ("arithmetic", "default", 150),
            ("arithmetic", "terse", 150),
            ("bank", "default", 50),
            ("bank", "terse", 50),
        ]
    assert loaded[0] == loaded[1]  # the TOML and the YAML say the same
    example = docs / "examples" / "smollm2.toml"
    config, source = load_config(example)
    assert [p.variant for p in build_parts(config, source)] == ["default", "terse"] * 2
