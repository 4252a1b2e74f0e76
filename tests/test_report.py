"""The HTML report: self-contained, and drawn — rendered by headless Chromium to PNG."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.analysis import profile, render, write_report
from nemo_gym.analysis.report import COLORS, PLOTS
from nemo_gym.collect import Part
from nemo_gym.errors import ModelError
from nemo_gym.models import ScriptedModel


async def _run(tmp_path: Path) -> Path:
    """A small run with every kind of outcome: right, wrong, no answer, cut off, failed."""

    def reply(request: gym.ModelRequest) -> object:
        question = request.messages[-1].content
        expression = question.removeprefix("What is ").removesuffix("?")
        answer = eval(expression)
        pick = (request.sampling.seed or 0) % 6
        if pick == 0:
            return gym.ModelResponse(
                message=gym.Message.assistant("Let me think " * 40),
                finish_reason="length",
                usage=gym.Usage(completion_tokens=120),
            )
        if pick == 1:
            raise ModelError("upstream 503", code="server_error")
        if pick == 2:
            return "I do not know."
        if pick == 3:
            return f"\\boxed{{{answer + 1}}}" + " because" * (pick * 5)
        return f"The answer is \\boxed{{{answer}}}" + " so" * pick

    model = ScriptedModel(reply)
    parts = [
        Part(gym.make("arithmetic", size=12), variant="base"),
        Part(
            gym.make("arithmetic", size=12),
            variant="careful",
            harness=gym.harnesses.SingleTurn(system_prompt="Check your work. Use \\boxed{}."),
        ),
        Part(gym.make("arithmetic_small", size=12), variant="base"),
        Part(gym.make("arithmetic_small", size=12), variant="careful"),
    ]
    out = tmp_path / "run"
    await gym.collect(parts, model, output=out, repeats=3)
    return out


async def test_the_report_is_self_contained_and_has_every_plot(tmp_path: Path) -> None:
    run = await _run(tmp_path)
    html = render(profile(run))
    assert "<script" not in html.lower()
    assert not re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert not re.findall(r"url\(", html)
    plots = set(re.findall(r'data-plot="([^"]+)"', html))
    assert plots >= {*PLOTS, "diagnostics", "variants"}
    for name in PLOTS:
        svg = re.search(rf'<svg class="plot" data-plot="{name}".*?</svg>', html, re.S).group(0)
        assert 'class="mark"' in svg, f"plot {name} has no marks"
        assert COLORS[name] in svg
    for cls in ("truncated", "no_answer", "wrong", "infrastructure"):
        assert f"{cls}:" in html  # a section of examples per class
    assert "upstream 503" in html


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _render(chromium: str, html: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            # Nothing may load from a network: every name resolves to nowhere.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            *args,
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def _hex(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


async def test_chromium_draws_the_report_plots(tmp_path: Path) -> None:
    chromium = _chromium()
    if chromium is None:
        if os.environ.get("NEMO_GYM_REQUIRE_CHROMIUM"):
            pytest.fail("NEMO_GYM_REQUIRE_CHROMIUM is set but no chromium is installed")
        pytest.skip("needs Debian's chromium (apt-get install chromium); CI installs it")
    image_module = pytest.importorskip("PIL.Image")
    run = await _run(tmp_path)
    report = write_report(profile(run), run / "report.html")
    # The DOM as Chromium parsed it: every plot is an SVG with marks in it.
    dom = _render(chromium, report, "--dump-dom").stdout
    for name in (*PLOTS, "diagnostics", "variants"):
        svg = re.search(rf'<svg class="plot" data-plot="{name}".*?</svg>', dom, re.S)
        assert svg is not None and 'class="mark"' in svg.group(0), name
    # The pixels: each plot's marks are drawn in its own colour.
    png = tmp_path / "report.png"
    _render(chromium, report, f"--screenshot={png}", "--window-size=1280,3600")
    image = image_module.open(png).convert("RGB")
    counts: dict[tuple[int, int, int], int] = {}
    for color, n in image.getcolors(maxcolors=1 << 24) or []:
        counts[n] = counts.get(n, 0) + color
    for name in PLOTS:
        assert counts.get(_hex(COLORS[name]), 0) >= 30, f"plot {name} is not drawn"


def test_the_header_names_the_model_without_null_options() -> None:
    from nemo_gym.analysis.report import model_label
    from nemo_gym.spec import Spec

    assert model_label(Spec(kind="model", name="local", options={"model": None})) == "local"
    assert (
        model_label(
            Spec(kind="model", name="openai", options={"model": "m", "base_url": "http://h/v1"})
        )
        == "openai (base_url=http://h/v1, model=m)"
    )
    assert model_label(None) == "?"  # a version-1 run.json recorded no model spec


def test_axes_tell_ticks_apart_and_count_in_whole_numbers() -> None:
    from nemo_gym.analysis import svg

    # Rollouts that share a latency (all about 123 s): every x tick a different label.
    plot = svg.histogram([123.4] * 5, plot_id="latency", title="latency", xlabel="s", color="#000")
    labels = re.findall(r'text-anchor="middle" font-size="11" fill="[^"]+">([^<]+)</text>', plot)
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    # Counts of 2 at most: ticks 0, 1, 2 rather than 0, 0.5, 1, 1.5, 2.
    assert svg.nice_ticks(0, 2, 4, integer=True) == [0, 1, 2]
    assert all(float(t).is_integer() for t in svg.nice_ticks(0, 7, 4, integer=True))
    counts = svg.histogram([1.0, 1.0, 2.0], plot_id="h", title="t", xlabel="x", color="#000")
    y_labels = re.findall(r'text-anchor="end" font-size="11" fill="[^"]+">([^<]+)</text>', counts)
    assert y_labels and all(label.isdigit() for label in y_labels), y_labels
