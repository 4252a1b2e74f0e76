"""Task rows: prepare from a dataset, read back, validate; errors name file, line, field."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.dataset import prepare, read_tasks, validate_tasks
from nemo_gym.errors import ConfigError


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prepare_guesses_the_fields_and_keeps_the_rest_as_metadata(tmp_path: Path) -> None:
    source = jsonl(
        tmp_path / "gsm.jsonl",
        [{"question": f"What is {i}+1?", "answer": str(i + 1), "level": i % 3} for i in range(5)],
    )
    done = prepare(source, tmp_path / "tasks.jsonl")
    assert (done.rows, done.prompt, done.answer, done.id, done.metadata) == (
        5,
        "question",
        "answer",
        None,
        ["level"],
    )
    tasks = list(read_tasks(tmp_path / "tasks.jsonl"))
    assert [t.prompt for t in tasks][:2] == ["What is 0+1?", "What is 1+1?"]
    assert tasks[2].answer == "3" and tasks[2].metadata == {"level": 2}
    assert len({t.id for t in tasks}) == 5  # derived from the content


def test_prepare_with_a_template_a_system_prompt_and_an_id_field(tmp_path: Path) -> None:
    source = tmp_path / "mc.csv"
    source.write_text("uid,q,a,b,gold\nx1,Sky?,blue,green,a\nx2,Grass?,blue,green,b\n")
    prepare(
        source,
        tmp_path / "tasks.jsonl",
        template="{q}\nA) {a}\nB) {b}",
        system="Answer with a letter.",
        answer_field="gold",
        id_field="uid",
        metadata=["a", "b"],
    )
    first, second = read_tasks(tmp_path / "tasks.jsonl")
    assert first.id == "x1" and second.answer == "b"
    assert [m.role for m in first.messages] == ["system", "user"]
    assert first.messages[1].content == "Sky?\nA) blue\nB) green"
    assert first.metadata == {"a": "blue", "b": "green"}


def test_prepare_reads_a_hugging_face_dataset_on_disk(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_dict(
        {"problem": ["1+1?", "2+2?"], "solution": ["2", "4"], "id": [7, 8]}
    )
    datasets.DatasetDict({"test": data, "train": data}).save_to_disk(str(tmp_path / "hf"))
    with pytest.raises(ConfigError, match="has splits test, train; pass --split"):
        prepare(tmp_path / "hf", tmp_path / "t.jsonl")
    done = prepare(tmp_path / "hf", tmp_path / "t.jsonl", split="train")
    assert (done.prompt, done.answer, done.id) == ("problem", "solution", "id")
    assert [t.id for t in read_tasks(tmp_path / "t.jsonl")] == ["7", "8"]


def test_prepare_errors_name_the_row_and_field(tmp_path: Path) -> None:
    rows = [{"question": "a?", "answer": "1"}, {"answer": "2"}]
    with pytest.raises(ConfigError, match=r"bad.jsonl:2: missing field 'question'"):
        prepare(jsonl(tmp_path / "bad.jsonl", rows), tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()  # written whole or not at all
    rows = [{"id": 1, "question": "a?"}, {"id": 1, "question": "b?"}]
    with pytest.raises(
        ConfigError, match=r"dup.jsonl:2: field 'id' gives id '1', as .*dup.jsonl:1"
    ):
        prepare(jsonl(tmp_path / "dup.jsonl", rows), tmp_path / "out.jsonl")
    with pytest.raises(ConfigError, match=r"no prompt field found"):
        prepare(jsonl(tmp_path / "odd.jsonl", [{"x": 1}]), tmp_path / "out.jsonl")
    with pytest.raises(ConfigError, match=r"odd.jsonl:1: field 'y' \(in --template\) is missing"):
        prepare(tmp_path / "odd.jsonl", tmp_path / "out.jsonl", template="{y}")


def test_reading_task_rows_names_file_line_and_field(tmp_path: Path) -> None:
    good = {"id": "a", "prompt": "2+2?", "answer": "4"}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(good) + "\n" + '{"id": "b", "prompt": "3+3?"\n')
    with pytest.raises(
        ConfigError,
        match=r"tasks.jsonl:2: not valid JSON \(Expecting ',' delimiter at column \d+, "
        r"after field 'prompt'\)",
    ):
        list(read_tasks(path))
    path.write_text(json.dumps(good) + "\n\n" + json.dumps({**good, "id": "b", "anwser": 4}) + "\n")
    with pytest.raises(ConfigError, match=r"tasks.jsonl:3: field 'anwser': unknown field"):
        list(read_tasks(path))
    path.write_text(json.dumps({**good, "prompt": 7}) + "\n")
    with pytest.raises(ConfigError, match=r"tasks.jsonl:1: field 'prompt': must be text, got int"):
        list(read_tasks(path))
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(ConfigError, match=r"tasks.jsonl:2: field 'id' is 'a', the id of line 1"):
        list(read_tasks(path))


def test_validate_reports_every_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    lines = [
        json.dumps({"id": "a", "prompt": "x"}),
        "{not json",
        json.dumps({"id": "b", "prompt": "y", "extra": 1}),
        json.dumps({"id": "c", "prompt": "z"}),
        json.dumps([1, 2]),
    ]
    path.write_text("\n".join(lines) + "\n")
    valid, errors = validate_tasks(path)
    assert valid == 2
    assert [e.split(": ", 1)[0].rsplit(":", 1)[1] for e in errors] == ["2", "3", "5"]
    assert "field 'extra': unknown field" in errors[1]


TEXT = st.text(string.printable + "éü中", max_size=30)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(TEXT.filter(str.strip), st.one_of(TEXT, st.integers(), st.none())),
        min_size=1,
        max_size=6,
        unique_by=lambda pair: pair[0],
    )
)
def test_prepared_rows_read_back_as_the_tasks_they_describe(
    tmp_path_factory: pytest.TempPathFactory, pairs: list[tuple[str, object]]
) -> None:
    tmp = tmp_path_factory.mktemp("rows")
    rows = [{"prompt": p, "answer": a, "n": i} for i, (p, a) in enumerate(pairs)]
    prepare(jsonl(tmp / "src.jsonl", rows), tmp / "tasks.jsonl")
    back = list(read_tasks(tmp / "tasks.jsonl"))
    expected = [gym.Task(prompt=p, answer=a, metadata={"n": i}) for i, (p, a) in enumerate(pairs)]
    assert back == expected


def test_prepare_reads_parquet_and_json(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"question": ["a?", "b?"], "answer": ["1", "2"]})
    pq.write_table(table, tmp_path / "data.parquet")
    assert prepare(tmp_path / "data.parquet", tmp_path / "p.jsonl").rows == 2
    (tmp_path / "data.json").write_text(json.dumps({"data": [{"input": "x", "target": "y"}]}))
    done = prepare(tmp_path / "data.json", tmp_path / "j.jsonl")
    assert (done.rows, done.prompt, done.answer) == (1, "input", "target")
    assert [t.answer for t in read_tasks(tmp_path / "p.jsonl")] == ["1", "2"]


@pytest.mark.parametrize("depth", [200_000, 5_000, 201])
def test_deeply_nested_json_in_a_task_file_names_file_and_line(tmp_path: Path, depth: int) -> None:
    # A hostile task file: before, `[`*200000 was a RecursionError traceback, and a
    # nesting the json module accepted reached pydantic and every later writer.
    path = tmp_path / "tasks.jsonl"
    deep = "[" * depth + "]" * depth
    path.write_text(
        json.dumps({"id": "a", "prompt": "ok"}) + "\n" + f'{{"id": "b", "prompt": "x", '
        f'"metadata": {{"deep": {deep}}}}}\n'
    )
    with pytest.raises(ConfigError, match=r"tasks\.jsonl:2: .*nested over 200 levels"):
        list(read_tasks(path))
    valid, errors = validate_tasks(path)
    assert valid == 1 and len(errors) == 1 and "tasks.jsonl:2:" in errors[0]
    source = tmp_path / "source.jsonl"
    source.write_text(path.read_text())
    with pytest.raises(ConfigError, match=r"source\.jsonl:2: .*nested over 200 levels"):
        prepare(source, tmp_path / "out.jsonl")


def test_deeply_nested_json_file_and_field_are_refused_clearly(tmp_path: Path) -> None:
    from nemo_gym.envs.rows import Row

    deep = "[" * 100_000 + "]" * 100_000
    whole = tmp_path / "rows.json"
    whole.write_text(f'[{{"question": "q", "answer": {deep}}}]')
    with pytest.raises(ConfigError, match=r"rows\.json: nested over 200 levels"):
        prepare(whole, tmp_path / "out.jsonl")
    shallow_enough_for_json = "[" * 500 + "]" * 500
    whole.write_text(f'[{{"question": "q", "answer": {shallow_enough_for_json}}}]')
    with pytest.raises(ConfigError, match=r"rows\.json: item 0: .*nested over 200"):
        prepare(whole, tmp_path / "out.jsonl")
    row = Row({"tests": deep}, "rows.jsonl:7", 0)
    with pytest.raises(ConfigError, match=r"rows\.jsonl:7: field 'tests' is not valid JSON"):
        row.json("tests")
