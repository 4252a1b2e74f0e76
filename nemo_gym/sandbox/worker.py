"""The in-sandbox worker: started once per sandbox, forks one child per exec.

This file is a standalone program (standard library only, no nemo_gym import): the
providers run it as ``python -I -c <this source> <config json>`` inside the sandbox, so
it needs no file on the sandbox's filesystem. It talks to the host over a unix socket
on its stdin and stdout with frames (see `encode_frame`) and never forks the host
(trainer) process.

Sandboxed code must never reach that channel, or it could write replies (an exit code,
an output) the host would take for its own. The worker moves the channel off fds 0/1
and every child closes it before running anything; the worker drops every capability
(also as root) and makes itself non-dumpable (see `_drop_privileges`), so nothing it
runs can open ``/proc/<worker>/fd/*`` or take its descriptors with ``pidfd_getfd`` or
ptrace; and a socket, unlike a pipe, cannot be reopened through ``/proc`` from any
process that holds it (the sandbox's init, the host).

Per request it forks a child that: starts its own session (``setsid``), applies the
rlimits, gets its stdin from a memfd (never blocks the worker), has stdout and stderr
captured through pipes and capped at ``output`` bytes (past the cap the worker keeps
reading and discards, so a chatty child never blocks on a full pipe), and is killed as
a whole process group (``SIGKILL`` to ``-pgid``) at its deadline. Every child is reaped.

The worker is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a grandchild that leaves
its process group and is orphaned is re-parented to the worker rather than to init, so
``reset`` and ``shutdown`` can find and kill it. Inside the ``local`` provider the pid
namespace kills whatever is left when the sandbox ends.

Python fast path: ``python`` and ``batch`` requests run compiled Python code in the
forked child itself (``exec`` of a code object, no new interpreter). The code is
compiled once, in the worker, and every forked child inherits the code object.

Completion: a Python child reports that its code ran to the end (no exception, no
``SystemExit``, no ``os._exit``) by writing a per-run nonce, drawn by the worker at the
fork, to a pipe only the worker reads; the result says ``completed``. With
``tests_as_code`` each batch input is test code (compiled here, never passed through
stdin or a builtin the program could replace), run after the program in its namespace,
with the builtins, trace and profile hooks reset first. A program that exits early,
closes its stdout, kills its parent or prints a guessed marker never completes.

Where the time goes, and what keeps it short (on a VM a page fault costs microseconds,
and a fork of this ~8 MB process costs about a millisecond, most of it page tables and
copy-on-write faults):

- a spare child is forked while the worker is idle and waits on a pipe; the next exec
  hands it its run (code, stdin, env, limits: a marshalled dict) instead of forking;
- a batch forks its next run while the current one runs; that child does its whole
  setup, then waits for its turn (runs never overlap, they stay one at a time);
- the child's setup touches as little as possible (stdio objects made once in the
  worker, the environment changed only where an exec's `env` differs);
- a Python child closes stdout and stderr before ``_exit``; the worker then reads the
  exit code from ``/proc/PID/stat`` once the kernel has fixed it, without waiting for
  the teardown of the child's memory; the child is reaped when it is gone, and a new
  job starts only once every child of the previous ones is reaped.
"""

from __future__ import annotations

import builtins
import errno
import gc
import io
import json
import marshal
import os
import resource
import select
import selectors
import shutil
import signal
import struct
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

FRAME = struct.Struct("!II")  # header length, body length
READ_CHUNK = 1 << 16
PIPE_GRACE_S = 0.2  # after the child exits, how long to wait for pipes held by its leftovers
MAX_SOURCE_BYTES = 1 << 20  # Python source the worker agrees to compile
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3 = 0x20080522
PF_EXITING = 0x4  # /proc/PID/stat flags: the process is exiting
GO, SPARE = b"g", b"s"  # what a child forked ahead reads when its turn comes
RUN_KEYS = ("env", "cwd", "limits", "mode", "argv", "args", "codes", "test")  # a spare's
SPARE_MAX_BYTES = 60 << 10  # a spare's run (code and stdin) must fit in its go pipe
NONCE_BYTES = 16


def _libc_prctl() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


_PRCTL = _libc_prctl()  # bound once in the worker; every forked child inherits it
_PRISTINE_BUILTINS = dict(builtins.__dict__)  # restored before a run's test code


def encode_frame(header: dict[str, Any], blobs: Sequence[bytes] = ()) -> bytes:
    """One frame: lengths, a JSON header (with the blob lengths) and the blobs."""
    header = dict(header, blobs=[len(b) for b in blobs])
    head = json.dumps(header, separators=(",", ":")).encode()
    body = b"".join(blobs)
    return FRAME.pack(len(head), len(body)) + head + body


def split_blobs(header: dict[str, Any], body: bytes) -> list[bytes]:
    """The blobs of a frame body, cut by the lengths in its header."""
    blobs, offset = [], 0
    for size in header.get("blobs", ()):
        blobs.append(body[offset : offset + size])
        offset += size
    return blobs


# ---------------------------------------------------------------- in the forked child


def _apply_limits(limits: dict[str, int]) -> None:
    for name, key in (
        ("cpu", resource.RLIMIT_CPU),
        ("as", resource.RLIMIT_AS),
        ("fsize", resource.RLIMIT_FSIZE),
        ("nofile", resource.RLIMIT_NOFILE),
        ("nproc", resource.RLIMIT_NPROC),
    ):
        value = limits.get(name)
        if not value:
            continue
        hard = value + 1 if name == "cpu" else value
        _, current_hard = resource.getrlimit(key)
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
            value = min(value, hard)
        resource.setrlimit(key, (value, hard))


def _child(spec: dict[str, Any], stdin_fd: int, out_w: int, err_w: int, go_r: int) -> None:
    """Runs in the forked child; never returns.

    A child forked for a known run (`spec` has its "mode") does all its setup at once.
    With `go_r` >= 0 it was forked ahead of its turn and then waits on `go_r`: one byte
    (`GO`) starts a prepared child (the next run of a batch); a spare, forked while the
    worker was idle before any request, gets `SPARE` followed by its run as a marshalled
    dict (stdin included) and does the run-specific setup then. End of file instead means
    cancelled (or the worker died): the child exits without running anything. A setup
    error is reported only once the child's turn has come, so results stay in order.
    """
    code = 127
    error = b""
    try:
        os.setsid()
        if stdin_fd >= 0:
            os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        # Every worker fd is close-on-exec; a Python child never execs, so it closes them
        # here, or user code could write forged replies into the protocol channel.
        for fd in spec["close_fds"]:
            try:
                os.close(fd)
            except OSError:
                pass
        # Dumpable again, now that it holds nothing of the worker's: the worker, which
        # has no CAP_SYS_PTRACE, reads the exit code from /proc/PID/stat only then.
        _PRCTL(PR_SET_DUMPABLE, 1, 0, 0, 0)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if "mode" in spec:
            _prepare(spec)
    except BaseException:  # reported when the child's turn comes (after go)
        error = traceback.format_exc().encode(errors="replace")
    if go_r >= 0:
        run = _wait_go(go_r)
        if run is None:  # cancelled (or the worker died): run nothing
            os._exit(0)
        if run and not error:
            try:
                spec.update(run)
                fd = _stdin_fd(spec.pop("stdin"))
                os.dup2(fd, 0)
                os.close(fd)
                _prepare(spec)
            except BaseException:
                error = traceback.format_exc().encode(errors="replace")
    if not error:
        try:
            if spec["mode"] == "python":
                code = _run_python(spec)
                # Closing stdout/stderr now (flushed) lets the worker see the end of the
                # output, and read the exit code from /proc, while the kernel still tears
                # down this process's copy of the worker's memory (the slow part of exit).
                for fd in (1, 2):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            else:
                # Python ignores SIGPIPE and SIGXFSZ; an exec'd program must get the defaults.
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                argv = spec["argv"]
                try:
                    os.execvpe(argv[0], argv, spec["env"])
                except OSError as exc:
                    error = f"exec {argv[0]!r} failed: {exc.strerror}\n".encode()
                    code = 126 if exc.errno == errno.EACCES else 127
        except BaseException:
            error = traceback.format_exc().encode(errors="replace")
    if error:
        try:
            os.write(2, error)
        except OSError:
            pass
    os._exit(code)


def _wait_go(go_r: int) -> dict[str, Any] | None:
    """Block until the worker says go: {} (prepared), the run (a spare), None (cancelled)."""
    try:
        kind = os.read(go_r, 1)
        if kind == GO:
            return {}
        if kind != SPARE:
            return None
        data = bytearray()
        size = None
        while size is None or len(data) < size + 4:
            chunk = os.read(go_r, 1 << 16)
            if not chunk:
                return None  # a partial message: the worker gave up on this spare
            data += chunk
            if size is None and len(data) >= 4:
                size = int.from_bytes(data[:4], "big")
        run = marshal.loads(bytes(data[4 : 4 + size]))
    except (OSError, ValueError, EOFError, TypeError):
        return None
    finally:
        try:
            os.close(go_r)
        except OSError:
            pass
    return run if isinstance(run, dict) else None


def _prepare(spec: dict[str, Any]) -> None:
    """The run-specific setup: cwd, rlimits and, for Python, the interpreter's state."""
    os.chdir(spec["cwd"])
    _apply_limits(spec["limits"])
    if spec["mode"] == "python":
        _python_setup(spec)


def _stdin_fd(stdin: bytes | None) -> int:
    """An fd to read `stdin` from: a memfd (never blocks the writer), or /dev/null."""
    if not stdin:
        return os.open(os.devnull, os.O_RDONLY)
    fd = os.memfd_create("stdin")
    view = memoryview(stdin)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _python_setup(spec: dict[str, Any]) -> None:
    """Make the forked interpreter look like a fresh `python3 -c` (before user code runs).

    Kept small on purpose: every object the child touches costs it a copy-on-write page
    fault. The worker's environment already is the sandbox's (see `main`), so only an
    exec's own `env` changes it; the stdio objects were made once, in the worker, and are
    never used there, so each child gets them pristine.
    """
    env = spec["env"]
    environ = os.environ
    if len(environ) != len(env) or any(environ.get(k) != v for k, v in env.items()):
        # Replace the C environment and os.environ in place (what a subprocess inherits).
        for key in [k for k in environ if k not in env]:
            del environ[key]
        for key, value in env.items():
            if environ.get(key) != value:
                environ[key] = value
    sys.stdin, sys.stdout, sys.stderr = spec["stdio"]
    sys.argv = ["-c", *spec["args"]]
    sys.path.insert(0, "")


def _make_stdio() -> tuple[io.TextIOWrapper, io.TextIOWrapper, io.TextIOWrapper]:
    """Fresh text streams on fds 0-2 for the Python children (they inherit them unused)."""
    return (
        io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8"),
        io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8"),
        io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace"
        ),
    )


def _run_python(
    spec: dict[str, Any],
    # Bound when the call starts: what the user's code replaces later does not reach here.
    _exec: Any = exec,
    _write: Any = os.write,
    _close: Any = os.close,
    _settrace: Any = sys.settrace,
    _setprofile: Any = sys.setprofile,
    _builtins_dict: dict[str, Any] = builtins.__dict__,
    _pristine: dict[str, Any] = _PRISTINE_BUILTINS,
    _isinstance: Any = isinstance,
    _str: type = str,
) -> int:
    code = 0
    done_fd, nonce = spec.pop("done", (-1, b""))
    test = spec.get("test")
    completed = False
    try:
        # a fresh namespace per child; the code objects are the worker's (or a copy)
        namespace = {"__builtins__": builtins, "__doc__": None}
        for compiled, name in spec["codes"]:
            namespace["__name__"] = name
            _exec(compiled, namespace)
        if test is not None:
            # The test judges the program: it runs with the interpreter the program found,
            # not one the program rewired (builtins, trace and profile hooks).
            _settrace(None)
            _setprofile(None)
            for key in [k for k in _builtins_dict if k not in _pristine]:
                del _builtins_dict[key]
            _builtins_dict.update(_pristine)
            namespace["__builtins__"] = builtins
            if _isinstance(test, _str):  # the test itself does not compile
                raise SyntaxError(f"the test does not compile: {test}")
            _exec(test, namespace)
        completed = True
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code & 0xFF
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException as exc:
        # skip this function's own frame: the traceback starts in the user's code
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        traceback.print_exception(type(exc), exc, tb)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream must not change the exit code
            pass
    if completed and done_fd >= 0:
        try:
            _write(done_fd, nonce)
        except OSError:
            pass
    if done_fd >= 0:
        try:
            _close(done_fd)
        except OSError:
            pass
    return code


# ---------------------------------------------------------------- the worker


class Run:
    """One forked child and what it printed.

    A run forked ahead of its turn (the next input of a batch) is `waiting` until the
    worker writes to `go_w`; its wall-clock deadline and duration start then.
    """

    def __init__(
        self, pid: int, out_r: int, err_r: int, deadline: float, cap: int, go_w: int = -1
    ) -> None:
        self.pid = pid
        self.fds = {out_r: bytearray(), err_r: bytearray()}
        self.out_r, self.err_r = out_r, err_r
        self.truncated = {out_r: False, err_r: False}
        self.open = {out_r, err_r}
        self.deadline = deadline
        self.cap = cap
        self.go_w = go_w
        self.waiting = go_w >= 0
        self.started = time.monotonic()
        self.status: int | None = None
        self.reaped = False
        self.ended = 0.0
        self.timed_out = False
        self.done_r = -1  # where a Python child writes its nonce once its code completed
        self.nonce = b""

    def completed(self) -> bool:
        """Whether the child wrote its nonce (its code ran to the end); closes the pipe."""
        if self.done_r < 0:
            return False
        try:
            data = os.read(self.done_r, 2 * NONCE_BYTES)
        except OSError:
            data = b""
        self.close_done()
        return bool(self.nonce) and data == self.nonce

    def close_done(self) -> None:
        if self.done_r >= 0:
            os.close(self.done_r)
            self.done_r = -1

    def result(self) -> tuple[dict[str, Any], list[bytes]]:
        status = self.status if self.status is not None else -signal.SIGKILL
        completed = self.completed()
        return (
            {
                "exit_code": status,
                "completed": completed and status == 0 and not self.timed_out,
                "timed_out": self.timed_out,
                "duration_s": round(max((self.ended or time.monotonic()) - self.started, 0.0), 6),
                "stdout_truncated": self.truncated[self.out_r],
                "stderr_truncated": self.truncated[self.err_r],
            },
            [bytes(self.fds[self.out_r]), bytes(self.fds[self.err_r])],
        )


class Job:
    """A request being served: one run (exec, python) or a sequence of runs (batch).

    A batch keeps its next run forked ahead (`next`), waiting for its turn: the fork and
    the child's setup then overlap the current run instead of adding to it. Runs still
    happen one at a time, in order.
    """

    def __init__(self, request: dict[str, Any], blobs: list[bytes], spec: dict[str, Any]) -> None:
        self.id = request["id"]
        self.request = request
        self.spec = spec
        self.stdins = blobs
        self.index = 0  # inputs forked so far
        self.run: Run | None = None
        self.next: Run | None = None
        self.results: list[tuple[dict[str, Any], list[bytes]]] = []
        self.deadline = time.monotonic() + float(request.get("total_timeout") or 1e9)
        self.timeout = float(request["timeout"])
        self.batch = request["op"] == "batch"
        self.tests: list[Any] = []  # with tests_as_code: per input, a code object or an error

    def test(self, index: int) -> Any:
        return self.tests[index] if index < len(self.tests) else None


class Worker:
    def __init__(self, config: dict[str, Any], proto_in: int, proto_out: int) -> None:
        self.workdir = config["workdir"]
        self.base_env = config.get("env", {})
        self.stdio = _make_stdio()  # after main() put /dev/null on fds 0-2
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.inbuf = bytearray()
        self.last_id = 0
        self.jobs: dict[int, Job] = {}
        self.runs: dict[int, tuple[Job | None, Run]] = {}  # by pid; a spare's job is None
        self.fd_runs: dict[int, Run] = {}
        self.go_fds: set[int] = set()  # go pipes of runs forked ahead
        self.spare: Run | None = None  # a child forked while idle, waiting for the next run
        self.exiting: set[int] = set()  # pids of finished runs not reaped yet
        self.want_spare = True
        self.codes: dict[tuple[str, bytes], Any] = {}  # compiled code by (filename, source)
        self.selector = selectors.DefaultSelector()
        os.set_blocking(proto_in, False)
        self.selector.register(proto_in, selectors.EVENT_READ, "proto")
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake_r, self.wake_w = wake_r, wake_w
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        self.selector.register(wake_r, selectors.EVENT_READ, "wake")
        self.closing = False

    # -- protocol

    def send(self, header: dict[str, Any], blobs: Sequence[bytes] = ()) -> None:
        data = memoryview(encode_frame(header, blobs))
        try:
            while data:
                try:
                    data = data[os.write(self.proto_out, data) :]
                except BlockingIOError:
                    # in and out are one socket, made non-blocking for reading
                    select.select([], [self.proto_out], [])
        except OSError:  # the host is gone: stop serving
            self.closing = True

    def read_requests(self) -> None:
        try:
            chunk = os.read(self.proto_in, READ_CHUNK * 4)
        except BlockingIOError:
            return
        if not chunk:
            self.closing = True
            return
        self.inbuf += chunk
        while len(self.inbuf) >= FRAME.size:
            head_len, body_len = FRAME.unpack_from(self.inbuf)
            end = FRAME.size + head_len + body_len
            if len(self.inbuf) < end:
                break
            header = json.loads(bytes(self.inbuf[FRAME.size : FRAME.size + head_len]))
            body = bytes(self.inbuf[FRAME.size + head_len : end])
            del self.inbuf[:end]
            rid = header.get("id") if isinstance(header, dict) else None
            if not isinstance(rid, int) or rid <= self.last_id:
                continue  # not the host's: its ids only grow (see WorkerSandbox._new_id)
            self.last_id = rid
            try:
                self.handle(header, split_blobs(header, body))
            except Exception as exc:  # a bad request answers with an error, the worker lives
                self.send({"id": header.get("id"), "ok": False, "error": f"{exc!r}"})

    def handle(self, req: dict[str, Any], blobs: list[bytes]) -> None:
        op = req["op"]
        if op == "ping":
            self.send({"id": req["id"], "ok": True, "pid": os.getpid()})
        elif op in ("exec", "python", "batch"):
            self.start_job(req, blobs)
        elif op == "write":
            self.file_op(req, lambda path: self._write(path, blobs[0], req.get("mode")))
        elif op == "read":
            self.file_op(req, lambda path: self._read(path, int(req.get("max_bytes") or 0)))
        elif op == "kill":
            job = self.jobs.get(req["target"])
            if job is not None and job.run is not None:
                job.deadline = 0.0
                self.expire(job.run, time.monotonic())
        elif op == "reset":
            self.kill_all(keep_spare=True)
            if req.get("wipe", True):
                self.wipe_workdir()
            self.send({"id": req["id"], "ok": True})
        elif op == "shutdown":
            self.closing = True
        else:
            raise ValueError(f"unknown op {op!r}")

    def file_op(self, req: dict[str, Any], action: Any) -> None:
        path = os.path.join(self.workdir, req["path"])
        try:
            data = action(path)
        except OSError as exc:
            self.send(
                {
                    "id": req["id"],
                    "ok": False,
                    "errno": exc.errno,
                    "error": exc.strerror or str(exc),
                    "path": req["path"],
                }
            )
            return
        self.send({"id": req["id"], "ok": True}, [data] if data is not None else [])

    @staticmethod
    def _write(path: str, data: bytes, mode: int | None) -> None:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
        if mode is not None:
            os.chmod(path, mode)

    @staticmethod
    def _read(path: str, max_bytes: int) -> bytes:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1) if max_bytes else handle.read()
        if max_bytes and len(data) > max_bytes:
            raise OSError(errno.EFBIG, f"file larger than the {max_bytes}-byte read limit")
        return data

    # -- jobs

    def compiled(self, source: bytes, filename: str) -> Any:
        key = (filename, source)
        code = self.codes.get(key)
        if code is None:
            if len(source) > MAX_SOURCE_BYTES:
                raise SyntaxError(f"source is larger than {MAX_SOURCE_BYTES} bytes")
            code = compile(source, filename, "exec", dont_inherit=True)
            if len(self.codes) > 64:
                self.codes.clear()
            self.codes[key] = code
        return code

    def start_job(self, req: dict[str, Any], blobs: list[bytes]) -> None:
        op = req["op"]
        env = dict(self.base_env)
        env.update(req.get("env") or {})
        spec: dict[str, Any] = {
            "env": env,
            "cwd": os.path.join(self.workdir, req.get("cwd") or "."),
            "limits": req.get("limits") or {},
            "mode": "argv" if op == "exec" or req.get("mode") == "argv" else "python",
            "argv": req.get("argv"),
            "args": req.get("args") or [],
            "stdio": self.stdio,
        }
        if spec["mode"] == "python":
            # blob 0 is the program, blob 1 an optional harness run after it in its namespace
            n_code = int(req.get("n_code", 1))
            try:
                codes = [(self.compiled(blobs[0], "<string>"), req.get("name") or "__main__")]
                if n_code == 2:
                    codes.append((self.compiled(blobs[1], "<harness>"), "__main__"))
            except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
                self.send(
                    {
                        "id": req["id"],
                        "ok": True,
                        "compile_error": "".join(traceback.format_exception_only(exc)),
                    }
                )
                return
            spec["codes"] = codes
            blobs = blobs[n_code:]
        tests: list[Any] = []
        if spec["mode"] == "python" and req.get("tests_as_code"):
            for blob in blobs:
                try:
                    tests.append(self.compiled(blob, "<test>"))
                except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
                    tests.append("".join(traceback.format_exception_only(*sys.exc_info()[:2])))
            blobs = [b""] * len(blobs)  # the test is code, the run's stdin is empty
        job = Job(req, blobs if op == "batch" else blobs[:1], spec)
        job.tests = tests
        self.jobs[job.id] = job
        if self.exiting and all(other is None for other, _ in self.runs.values()):
            self.wait_exiting()
        self.next_run(job)

    def next_run(self, job: Job) -> None:
        """Start the job's next run (the one forked ahead, if any), or finish the job."""
        now = time.monotonic()
        if job.index >= len(job.stdins) and job.next is None:
            self.finish(job)
            return
        if (job.results or job.next) and now >= job.deadline:  # later runs never start
            self.finish(job)
            return
        run = job.next
        job.next = None
        if run is None:
            run = self.take_spare(job) or self.fork_run(job, waiting=False)
            if run is None:  # fork failed: recorded as the run's result
                self.after_run(job)
                return
        else:
            self.go(run)
        run.started = now
        run.deadline = min(now + job.timeout, job.deadline)
        job.run = run
        if job.batch and job.index < len(job.stdins) and now < job.deadline:
            job.next = self.fork_run(job, waiting=True)

    def fork_run(self, job: Job, *, waiting: bool) -> Run | None:
        """Fork the child for the job's next input; None (and a result) if fork fails."""
        stdin = job.stdins[job.index]
        job.spec["test"] = job.test(job.index)
        job.index += 1
        try:
            return self.fork_child(job, job.spec, stdin, waiting=waiting)
        except OSError as exc:
            if waiting:  # no run ahead; the next one forks when its turn comes
                job.index -= 1
                return None
            job.results.append(
                ({"exit_code": 127, "timed_out": False, "duration_s": 0.0}, [b"", _err(exc)])
            )
            return None

    def fork_child(
        self, job: Job | None, spec: dict[str, Any], stdin: bytes | None, *, waiting: bool
    ) -> Run:
        """Fork a child with its output pipes (and a go pipe when `waiting`); OSError if not.

        A spare (`job` None) gets no stdin yet: it comes with the run, through the go pipe.
        """
        own: list[int] = []
        try:
            stdin_fd = _stdin_fd(stdin) if job is not None else -1
            if stdin_fd >= 0:
                own.append(stdin_fd)
            out_r, out_w = os.pipe()
            own += [out_r, out_w]
            err_r, err_w = os.pipe()
            own += [err_r, err_w]
            go_r = go_w = -1
            if waiting:
                go_r, go_w = os.pipe()
                own += [go_r, go_w]
            done_r = done_w = -1
            nonce = b""
            if spec.get("mode") != "argv":  # a Python run (or a spare, which may be one)
                done_r, done_w = os.pipe()
                own += [done_r, done_w]
                nonce = os.urandom(NONCE_BYTES)
            spec["done"] = (done_w, nonce)
            # the child closes all of these once its stdio is in place, all but its go pipe
            spec["close_fds"] = sorted({*self.worker_fds(), *own} - {go_r, done_w, 0, 1, 2})
            pid = os.fork()
        except OSError:
            for fd in own:
                os.close(fd)
            raise
        if pid == 0:
            _child(spec, stdin_fd, out_w, err_w, go_r)
        for fd in (stdin_fd, out_w, err_w, go_r, done_w):
            if fd >= 0:
                os.close(fd)
        cap = int((spec.get("limits") or {}).get("output") or 1 << 20)
        run = Run(pid, out_r, err_r, float("inf"), cap, go_w)
        run.done_r, run.nonce = done_r, nonce
        if done_r >= 0:
            os.set_blocking(done_r, False)
        self.runs[pid] = (job, run)
        if go_w >= 0:
            os.set_blocking(go_w, False)  # a write that does not fit drops the child instead
            self.go_fds.add(go_w)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, "run")
            self.fd_runs[fd] = run
        return run

    def fork_spare(self) -> None:
        """Fork a spare child while idle, so the next exec skips the fork and the setup."""
        try:
            self.spare = self.fork_child(None, {"stdio": self.stdio}, None, waiting=True)
        except OSError:  # no spare then (e.g. the pids limit); execs fork as they come
            self.spare = None

    def take_spare(self, job: Job) -> Run | None:
        """Hand the job's next run to the spare child, if there is one and the run fits."""
        spare = self.spare
        if spare is None:
            return None
        self.spare = None
        if spare.status is not None:  # it died waiting (killed from inside the sandbox)
            self.drop(spare)
            return None
        job.spec["test"] = job.test(job.index)
        run = {key: job.spec[key] for key in RUN_KEYS if key in job.spec}
        run["stdin"] = job.stdins[job.index]
        payload = marshal.dumps(run)
        if len(payload) > SPARE_MAX_BYTES:
            self.spare = spare  # kept for a smaller run
            return None
        message = SPARE + len(payload).to_bytes(4, "big") + payload
        try:
            written = os.write(spare.go_w, message)
        except OSError:
            written = 0
        if written != len(message):  # its pipe is smaller than usual, or it is gone
            self.drop(spare)
            return None
        self.close_go(spare)
        spare.waiting = False
        spare.cap = int(job.spec["limits"].get("output") or 1 << 20)
        job.index += 1
        self.runs[spare.pid] = (job, spare)
        return spare

    def go(self, run: Run) -> None:
        """Let a prepared run forked ahead start (it waits on its go pipe)."""
        run.waiting = False
        try:
            os.write(run.go_w, GO)
        except OSError:  # it died waiting (killed from inside the sandbox): its status says so
            pass
        self.close_go(run)

    def close_go(self, run: Run) -> None:
        if run.go_w >= 0:
            self.go_fds.discard(run.go_w)
            os.close(run.go_w)
            run.go_w = -1

    def drop(self, run: Run) -> None:
        """Cancel a run that never started: it exits (or is killed), is reaped, not reported."""
        self.close_go(run)  # EOF on its go pipe: it exits without running anything
        if not run.reaped:  # (a reaped pid may belong to someone else by now)
            _killpg(run.pid)
            try:
                os.kill(run.pid, signal.SIGKILL)  # also before its setsid
            except ProcessLookupError:
                pass
        for fd in list(run.open):
            self.close_fd(run, fd)
        run.close_done()
        self.runs.pop(run.pid, None)
        if not run.reaped:
            self.exiting.add(run.pid)  # reaped when it ends, like a finished run

    def worker_fds(self) -> list[int]:
        """The worker's own descriptors (protocol, wake-up pipe, selector, run pipes)."""
        return [
            self.proto_in,
            self.proto_out,
            self.wake_r,
            self.wake_w,
            self.selector.fileno(),
            *self.fd_runs,
            *self.go_fds,
        ]

    def read_output(self, fd: int) -> None:
        run = self.fd_runs[fd]
        try:
            chunk = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            self.close_fd(run, fd)
            return
        buf = run.fds[fd]
        room = run.cap - len(buf)
        if room >= len(chunk):
            buf += chunk
        else:
            buf += chunk[: max(room, 0)]
            run.truncated[fd] = True

    def close_fd(self, run: Run, fd: int) -> None:
        if fd in run.open:
            run.open.discard(fd)
            self.selector.unregister(fd)
            del self.fd_runs[fd]
            os.close(fd)
            if not run.open and run.status is None and not run.waiting:
                self.early_status(run)

    def early_status(self, run: Run) -> None:
        """The exit status of a child that is past the point of no return, before reaping.

        The kernel records the exit code, then detaches the process's memory (its mm),
        then tears that memory down, which for a fork of the worker is most of the cost
        of exiting, and only then reports the exit (SIGCHLD). `/proc/PID/stat` shows the
        process as exiting (PF_EXITING) with no memory (vsize 0) from the moment the code
        is final; the kernel writes both, so the child cannot forge them. The child is
        still reaped later (`exiting` tracks it).
        """
        try:
            with open(f"/proc/{run.pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            flags, vsize, code = int(fields[6]), int(fields[20]), int(fields[49])
        except (OSError, IndexError, ValueError):
            return
        if flags & PF_EXITING and vsize == 0:
            run.status = os.waitstatus_to_exitcode(code)
            run.ended = time.monotonic()

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.exiting.discard(pid)
            entry = self.runs.get(pid)
            if entry is not None:
                entry[1].reaped = True
                if entry[1].status is None:
                    entry[1].status = os.waitstatus_to_exitcode(status)
                    entry[1].ended = time.monotonic()

    def expire(self, run: Run, now: float) -> None:
        if run.status is None:
            run.timed_out = True
            _killpg(run.pid)
        run.deadline = now  # pipes get PIPE_GRACE_S more, then they are closed

    def tick(self) -> float:
        """Advance every run; the seconds until the next deadline (for select)."""
        now = time.monotonic()
        for job, run in list(self.runs.values()):
            if job is None or run.waiting or job.run is not run:
                continue  # forked ahead, not started: no deadline, no result yet
            if run.status is None and now >= run.deadline:
                self.expire(run, now)
            # leftovers of the child may hold its pipes open: wait a little, not forever
            if run.status is not None and not (run.open and now < run.ended + PIPE_GRACE_S):
                for fd in list(run.open):
                    self.close_fd(run, fd)
                del self.runs[run.pid]
                if not run.reaped:
                    self.exiting.add(run.pid)  # its exit code is known; reaped when it ends
                job.run = None
                job.results.append(run.result())
                if job.batch:
                    _killpg(run.pid)  # tests are independent: nothing of one outlives it
                self.after_run(job)  # may start the job's next run
        wait = 3600.0
        for job, run in self.runs.values():
            if job is None or run.waiting or job.run is not run:
                continue
            if run.status is not None:
                wait = min(wait, run.ended + PIPE_GRACE_S - now)
            elif run.timed_out:
                wait = min(wait, 0.01)  # killed, waiting for SIGCHLD
            else:
                wait = min(wait, run.deadline - now)
        return max(wait, 0.0)

    def after_run(self, job: Job) -> None:
        last = job.results[-1][0]
        failed = last["exit_code"] != 0 or last["timed_out"]
        if not job.batch or (failed and job.request.get("stop_on_error")):
            self.finish(job)
        elif (job.index < len(job.stdins) or job.next) and time.monotonic() < job.deadline:
            self.next_run(job)
        else:
            self.finish(job)

    def finish(self, job: Job) -> None:
        if job.next is not None:
            self.drop(job.next)
            job.next = None
        self.jobs.pop(job.id, None)
        self.want_spare = True
        if job.batch:
            blobs: list[bytes] = []
            for _, (out, err) in job.results:
                blobs += [out, err]
            self.send(
                {"id": job.id, "ok": True, "results": [head for head, _ in job.results]}, blobs
            )
        else:
            head, blobs = job.results[-1]
            self.send(dict(head, id=job.id, ok=True), blobs)

    # -- cleanup

    def kill_all(self, *, keep_spare: bool = False) -> None:
        """Kill every descendant: runs, their groups, and orphans re-parented to us.

        With `keep_spare` the idle spare survives: it never ran anything of the sandbox's.
        """
        if self.spare is not None and not keep_spare:
            self.drop(self.spare)
            self.spare = None
        spare = self.spare.pid if self.spare is not None else None
        for job in list(self.jobs.values()):
            job.deadline = 0.0  # a batch in flight starts no further run
            if job.next is not None:
                self.drop(job.next)
                job.next = None
        for _, run in list(self.runs.values()):
            if run.pid != spare:
                _killpg(run.pid)
        for _ in range(200):
            self.reap()
            children = [pid for pid in _children() if pid != spare]
            if not children:
                break
            for pid in children:
                _killpg(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            # wait for the next SIGCHLD (the wake-up pipe), not a fixed sleep
            select.select([self.wake_r], [], [], 0.01)
            self.drain_wake()
        self.reap()
        for owner, run in list(self.runs.values()):
            if owner is None:  # the spare: it ran nothing
                continue
            if run.status is None:
                run.status = -signal.SIGKILL
                run.ended = time.monotonic()
                run.timed_out = True
            run.deadline = 0.0
        self.tick()

    def wait_exiting(self) -> None:
        """Wait (briefly) until finished runs are reaped: a new job starts with none left."""
        deadline = time.monotonic() + 1.0
        while self.exiting and time.monotonic() < deadline:
            self.reap()
            if self.exiting:
                select.select([self.wake_r], [], [], 0.01)
                self.drain_wake()
        if self.exiting:  # never wait twice for what is no longer our child
            self.exiting &= set(_children())

    def drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def wipe_workdir(self) -> None:
        for entry in os.scandir(self.workdir):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass

    def serve(self) -> None:
        while not self.closing:
            timeout = self.tick()
            if self.want_spare and self.spare is None and not self.runs and not self.exiting:
                # idle: fork the next exec's child now, unless a request is already waiting
                if not select.select([self.proto_in], [], [], 0)[0]:
                    self.want_spare = False
                    self.fork_spare()
            for key, _ in self.selector.select(timeout):
                if key.data == "proto":
                    self.read_requests()
                elif key.data == "wake":
                    self.drain_wake()
                    self.reap()
                elif key.fileobj in self.fd_runs:
                    self.read_output(key.fileobj)
            self.reap()
        self.kill_all()


def _err(exc: BaseException) -> bytes:
    return f"{type(exc).__name__}: {exc}\n".encode()


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _children() -> list[int]:
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def _become_subreaper() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:  # without it, orphans go to init; the pid namespace still bounds them
        pass


def _drop_privileges() -> None:
    """Give up every capability for good, and make the worker non-dumpable.

    Without capabilities (CAP_SYS_PTRACE above all) nothing the sandbox runs can reach
    into another process of the same user that is non-dumpable or holds capabilities:
    no `/proc/PID/fd`, no `pidfd_getfd`, no ptrace, no `/proc/PID/mem`. The bounding
    set is emptied too (uid 0 regains capabilities on exec otherwise) and no_new_privs
    set (no setuid or file-capability binary gives any back). Raises `OSError` when the
    capabilities cannot be dropped: the worker must not serve with them.

    Non-dumpable: forked children inherit the flag (a Python child keeps it while it
    runs user code, so no other process of the sandbox can read its memory or
    descriptors); an exec'd program gets the normal flag back from the kernel, and holds
    nothing of the worker.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):  # EINVAL past the last capability; EPERM without CAP_SETPCAP
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                break
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all zero, twice
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset() could not drop the capabilities")
    for option, value in ((PR_SET_NO_NEW_PRIVS, 1), (PR_SET_DUMPABLE, 0)):
        if libc.prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def main() -> None:
    config = json.loads(sys.argv[1])
    # The protocol moves off fds 0/1 so that nothing a child inherits can write into it.
    channel = config.get("channel_fd")
    if channel is None:
        proto_in, proto_out = os.dup(0), os.dup(1)
    else:
        proto_in = proto_out = os.dup(int(channel))
        os.close(int(channel))
    os.set_inheritable(proto_in, False)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    os.makedirs(config["workdir"], exist_ok=True)
    os.chdir(config["workdir"])
    # The sandbox's environment becomes the worker's own: a child that adds nothing to
    # it then has nothing to change (the worker itself reads none of it).
    os.environ.clear()
    os.environ.update(config.get("env", {}))
    _become_subreaper()
    _drop_privileges()  # before anything runs: the reply channel stays the worker's
    worker = Worker(config, proto_in, proto_out)
    # Objects that exist now never need collecting: keeping them out of the GC's reach
    # spares every forked child copy-on-write faults on the worker's whole heap.
    gc.freeze()
    worker.send({"id": 0, "ok": True, "pid": os.getpid(), "ready": True})
    worker.serve()
    if config.get("remove_workdir"):
        # also when the host died without closing us: no temporary directory outlives us
        os.chdir("/")
        shutil.rmtree(config["workdir"], ignore_errors=True)


if __name__ == "__main__":
    main()
