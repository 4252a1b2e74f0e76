"""The `apptainer` provider: its command line, its errors, and a run through a stand-in.

Apptainer is not installable here (not in Debian 12), so the end-to-end test runs the
provider's real command line through a stand-in `apptainer` that checks the flags and
runs the worker on the host (its bind mount replaced by the bind's host directory).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import ResourceLimits, SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.apptainer import ApptainerProvider, apptainer_argv, find_binary
from nemo_gym.sandbox.base import worker_source

FAKE = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["APPTAINER_FAKE_LOG"], "a") as log:
    log.write(json.dumps(args[:-1]) + "\\n")  # all but the (long) worker config
assert args[0] == "exec", args
valued = {{"--network", "--bind", "--pwd"}}
flags, i = {{}}, 1
while args[i].startswith("-"):
    if args[i] in valued:
        flags[args[i]], i = args[i + 1], i + 2
    else:
        flags[args[i]], i = True, i + 1
for needed in ("--containall", "--bind", "--pwd"):
    if needed not in flags:
        sys.exit(f"fake apptainer: {{needed}} missing")
command = args[i + 1 :]
host = flags["--bind"].split(":")[0]
config = json.loads(command[-1])
config["workdir"] = host  # stands in for the bind mount
python = sys.executable if command[0] == "python3" else command[0]
os.chdir(host)
os.execv(python, [python, *command[1:-1], json.dumps(config)])
"""


@pytest.fixture
def fake_apptainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    binary = tmp_path / "bin" / "apptainer"
    binary.parent.mkdir()
    binary.write_text(FAKE)
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("APPTAINER_FAKE_LOG", str(tmp_path / "calls.jsonl"))
    return binary


def test_command_line_isolates_by_default() -> None:
    spec = SandboxSpec(image="/images/py.sif")
    argv = apptainer_argv("/usr/bin/apptainer", spec, "/tmp/host-work")
    assert argv[:3] == ["/usr/bin/apptainer", "exec", "--containall"]
    flags = argv[: argv.index("/images/py.sif")]
    assert ["--net", "--network", "none"] == flags[3:6]
    assert "--writable-tmpfs" in flags
    assert flags[flags.index("--bind") + 1] == "/tmp/host-work:/work"
    assert flags[flags.index("--pwd") + 1] == "/work"
    assert argv[argv.index("/images/py.sif") + 1 :] == ["python3", "-I", "-c", worker_source()]


def test_command_line_options() -> None:
    spec = SandboxSpec(image="docker://python:3.12-slim", network=True, workdir="/code")
    argv = apptainer_argv(
        "apptainer", spec, "/h", python="/opt/py/bin/python", writable_tmpfs=False,
        extra_args=["--nv"],
    )  # fmt: skip
    assert "--net" not in argv and "--network" not in argv
    assert "--writable-tmpfs" not in argv
    assert argv[argv.index("--bind") + 1] == "/h:/code"
    assert argv.index("--nv") < argv.index("docker://python:3.12-slim")
    assert argv[argv.index("docker://python:3.12-slim") + 1] == "/opt/py/bin/python"


def test_provider_image_default(fake_apptainer: Path) -> None:
    provider = ApptainerProvider(binary=str(fake_apptainer), image="default.sif")
    argv = provider.command(SandboxSpec(), "/h")
    assert argv[0] == str(fake_apptainer) and "default.sif" in argv
    assert "given.sif" in provider.command(SandboxSpec(image="given.sif"), "/h")


def test_no_image_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"needs SandboxSpec\(image=...\)"):
        apptainer_argv("apptainer", SandboxSpec(), "/h")


@pytest.mark.parametrize("workdir", ["relative", "/", "/tmp", "/proc"])
def test_bad_workdir_is_a_config_error(workdir: str) -> None:
    with pytest.raises(ConfigError, match="workdir"):
        apptainer_argv("apptainer", SandboxSpec(image="i.sif", workdir=workdir), "/h")


def test_missing_binary_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match="'apptainer' or 'singularity' on PATH") as info:
        find_binary()
    assert "apptainer.org" in str(info.value) and info.value.code == "sandbox_unavailable"
    with pytest.raises(SandboxError, match=r"'apptainer-9\.9'"):
        find_binary("apptainer-9.9")


async def test_missing_binary_fails_create_and_leaves_no_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with pytest.raises(SandboxError, match="on PATH"):
        await ApptainerProvider().create(SandboxSpec(image="i.sif"))
    assert not list(tmp_path.glob("nemo_gym_apptainer_*"))


def test_singularity_is_found_when_apptainer_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    singularity = tmp_path / "singularity"
    singularity.write_text("#!/bin/sh\n")
    singularity.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_binary() == str(singularity)


def test_registered_by_name() -> None:
    assert isinstance(get("apptainer"), ApptainerProvider)


async def test_runs_the_worker_through_the_command_line(
    fake_apptainer: Path, tmp_path: Path
) -> None:
    provider = ApptainerProvider(binary=str(fake_apptainer))
    spec = SandboxSpec(image="py.sif", limits=ResourceLimits(output_bytes=100))
    async with provider.start(spec) as box:
        result = await box.exec("echo hi; echo err >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (3, "hi\n", "err\n")
        await box.write_file("sub/data.bin", bytes(range(256)))
        assert await box.read_file("sub/data.bin") == bytes(range(256))
        assert (await box.exec("cat", stdin="in")).stdout == "in"
        result = await box.exec("sleep 20", timeout=0.5)
        assert result.timed_out and result.exit_code == -9
        result = await box.exec("yes | head -c 5000")
        assert len(result.stdout) == 100 and result.stdout_truncated
        python = await box.run_python("print(sum(range(10)))")
        assert python.stdout == "45\n"
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 1  # one container per sandbox, not one per exec
    host_workdir = calls[0][calls[0].index("--bind") + 1].split(":")[0]
    assert host_workdir.startswith(os.path.join(os.path.realpath("/tmp"), "nemo_gym_apptainer_"))
    assert not os.path.exists(host_workdir), "the host workdir outlived the sandbox"
