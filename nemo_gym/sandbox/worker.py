"""The in-sandbox worker: started once per sandbox, forks one child per exec.

This file is a standalone program (standard library only, no nemo_gym import): the
providers run it as ``python -I -c <this source> <config json>`` inside the sandbox, so
it needs no file on the sandbox's filesystem. It talks to the host over its stdin and
stdout with frames (see `encode_frame`) and never forks the host (trainer) process.

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
"""

from __future__ import annotations

import builtins
import errno
import gc
import io
import json
import os
import resource
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


def _child(spec: dict[str, Any], stdin_fd: int, out_w: int, err_w: int) -> None:
    """Runs in the forked child; never returns."""
    code = 127
    try:
        os.setsid()
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        # Every worker fd is close-on-exec; a Python child never execs, so it closes them
        # here, or user code could write forged replies into the protocol pipe.
        for fd in spec["close_fds"]:
            try:
                os.close(fd)
            except OSError:
                pass
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        env = spec["env"]
        os.chdir(spec["cwd"])
        _apply_limits(spec["limits"])
        if spec["mode"] == "argv":
            # Python ignores SIGPIPE and SIGXFSZ; an exec'd program must get the defaults.
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            argv = spec["argv"]
            try:
                os.execvpe(argv[0], argv, env)
            except OSError as exc:
                os.write(2, f"exec {argv[0]!r} failed: {exc.strerror}\n".encode())
                code = 126 if exc.errno == errno.EACCES else 127
        else:
            code = _run_python(spec, env)
    except BaseException:  # report whatever broke the child's setup, then exit
        try:
            os.write(2, traceback.format_exc().encode(errors="replace"))
        except OSError:
            pass
    os._exit(code)


def _run_python(spec: dict[str, Any], env: dict[str, str]) -> int:
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace"
    )
    sys.argv = ["-c", *spec.get("args", ())]
    sys.path.insert(0, "")
    code = 0
    try:
        for compiled, name in spec["codes"]:
            namespace = spec["namespace"]
            namespace["__name__"] = name
            exec(compiled, namespace)
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
    return code


# ---------------------------------------------------------------- the worker


class Run:
    """One forked child and what it printed."""

    def __init__(self, pid: int, out_r: int, err_r: int, deadline: float, cap: int) -> None:
        self.pid = pid
        self.fds = {out_r: bytearray(), err_r: bytearray()}
        self.out_r, self.err_r = out_r, err_r
        self.truncated = {out_r: False, err_r: False}
        self.open = {out_r, err_r}
        self.deadline = deadline
        self.cap = cap
        self.started = time.monotonic()
        self.status: int | None = None
        self.ended = 0.0
        self.timed_out = False

    def result(self) -> tuple[dict[str, Any], list[bytes]]:
        status = self.status if self.status is not None else -signal.SIGKILL
        return (
            {
                "exit_code": status,
                "timed_out": self.timed_out,
                "duration_s": round((self.ended or time.monotonic()) - self.started, 6),
                "stdout_truncated": self.truncated[self.out_r],
                "stderr_truncated": self.truncated[self.err_r],
            },
            [bytes(self.fds[self.out_r]), bytes(self.fds[self.err_r])],
        )


class Job:
    """A request being served: one run (exec, python) or a sequence of runs (batch)."""

    def __init__(self, request: dict[str, Any], blobs: list[bytes], spec: dict[str, Any]) -> None:
        self.id = request["id"]
        self.request = request
        self.spec = spec
        self.stdins = blobs
        self.index = 0
        self.run: Run | None = None
        self.results: list[tuple[dict[str, Any], list[bytes]]] = []
        self.deadline = time.monotonic() + float(request.get("total_timeout") or 1e9)


class Worker:
    def __init__(self, config: dict[str, Any], proto_in: int, proto_out: int) -> None:
        self.workdir = config["workdir"]
        self.base_env = config.get("env", {})
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.inbuf = bytearray()
        self.jobs: dict[int, Job] = {}
        self.runs: dict[int, tuple[Job, Run]] = {}  # by pid
        self.fd_runs: dict[int, Run] = {}
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
                data = data[os.write(self.proto_out, data) :]
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
            self.file_op(req, self._read)
        elif op == "kill":
            job = self.jobs.get(req["target"])
            if job is not None and job.run is not None:
                job.deadline = 0.0
                self.expire(job.run, time.monotonic())
        elif op == "reset":
            self.kill_all()
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
    def _read(path: str) -> bytes:
        with open(path, "rb") as handle:
            return handle.read()

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
        job = Job(req, blobs if op == "batch" else blobs[:1], spec)
        self.jobs[job.id] = job
        self.next_run(job)

    def next_run(self, job: Job) -> None:
        now = time.monotonic()
        if job.index >= len(job.stdins) or (job.index > 0 and now >= job.deadline):
            self.finish(job)
            return
        stdin = job.stdins[job.index]
        job.index += 1
        deadline = min(now + float(job.request["timeout"]), job.deadline)
        if job.spec["mode"] == "python":
            # each child gets a fresh namespace; the code objects are shared
            job.spec["namespace"] = {"__builtins__": builtins, "__doc__": None}
        stdin_fd = self.stdin_fd(stdin)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fds = {*self.worker_fds(), stdin_fd, out_r, out_w, err_r, err_w} - {0, 1, 2}
        job.spec["close_fds"] = sorted(fds)
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in (stdin_fd, out_r, out_w, err_r, err_w):
                os.close(fd)
            job.results.append(
                ({"exit_code": 127, "timed_out": False, "duration_s": 0.0}, [b"", _err(exc)])
            )
            self.after_run(job)
            return
        if pid == 0:
            _child(job.spec, stdin_fd, out_w, err_w)
        for fd in (stdin_fd, out_w, err_w):
            os.close(fd)
        run = Run(pid, out_r, err_r, deadline, int(job.spec["limits"].get("output") or 1 << 20))
        job.run = run
        self.runs[pid] = (job, run)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, "run")
            self.fd_runs[fd] = run

    def worker_fds(self) -> list[int]:
        """The worker's own descriptors (protocol, wake-up pipe, selector, run pipes)."""
        return [
            self.proto_in,
            self.proto_out,
            self.wake_r,
            self.wake_w,
            self.selector.fileno(),
            *self.fd_runs,
        ]

    @staticmethod
    def stdin_fd(stdin: bytes | None) -> int:
        if not stdin:
            return os.open(os.devnull, os.O_RDONLY)
        fd = os.memfd_create("stdin")
        view = memoryview(stdin)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

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

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            entry = self.runs.get(pid)
            if entry is not None:
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
            if run.status is None and now >= run.deadline:
                self.expire(run, now)
            # leftovers of the child may hold its pipes open: wait a little, not forever
            if run.status is not None and not (run.open and now < run.ended + PIPE_GRACE_S):
                for fd in list(run.open):
                    self.close_fd(run, fd)
                del self.runs[run.pid]
                job.run = None
                job.results.append(run.result())
                if job.request["op"] == "batch":
                    _killpg(run.pid)  # tests are independent: nothing of one outlives it
                self.after_run(job)  # may start the job's next run
        wait = 3600.0
        for _, run in self.runs.values():
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
        if job.request["op"] != "batch" or (failed and job.request.get("stop_on_error")):
            self.finish(job)
        elif job.index < len(job.stdins) and time.monotonic() < job.deadline:
            self.next_run(job)
        else:
            self.finish(job)

    def finish(self, job: Job) -> None:
        self.jobs.pop(job.id, None)
        if job.request["op"] == "batch":
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

    def kill_all(self) -> None:
        """Kill every descendant: runs, their groups, and orphans re-parented to us."""
        for _, run in list(self.runs.values()):
            _killpg(run.pid)
        for _ in range(200):
            children = _children()
            if not children:
                break
            for pid in children:
                _killpg(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.002)
            self.reap()
        self.reap()
        for _, run in list(self.runs.values()):
            if run.status is None:
                run.status = -signal.SIGKILL
                run.ended = time.monotonic()
                run.timed_out = True
            run.deadline = 0.0
        self.tick()

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
            for key, _ in self.selector.select(timeout):
                if key.data == "proto":
                    self.read_requests()
                elif key.data == "wake":
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                elif key.fileobj in self.fd_runs:
                    self.read_output(key.fileobj)  # type: ignore[arg-type]
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


def main() -> None:
    config = json.loads(sys.argv[1])
    # The protocol moves off fds 0/1 so that nothing a child inherits can write into it.
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    os.makedirs(config["workdir"], exist_ok=True)
    os.chdir(config["workdir"])
    _become_subreaper()
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
