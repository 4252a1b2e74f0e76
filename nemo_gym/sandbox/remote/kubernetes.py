"""`kubernetes`: sandboxes as Kubernetes pods through the official Python client (`pip install
'nemo-gym[kubernetes]'`), on the shared remote machinery (`nemo_gym.sandbox.remote.common`).

Each sandbox is one pod (`restartPolicy: Never`, one container idling until deleted)
whose `activeDeadlineSeconds` is the provider's `timeout_s`: the kubelet kills it then,
whoever holds it, so a SIGKILLed trainer leaves nothing running past it. The pod name
comes from the create call's idempotency key, so a create retried after a lost reply
finds its pod (409) instead of making a second. Labels are pod labels; reaping lists by
label selector.

Execs go over the pods/exec websocket (the client's `stream`, channel protocol v5, whose
stdin close lets a command see EOF) as `/bin/sh -c WRAPPER`: the wrapper enters the
cwd, applies the per-exec rlimits with `ulimit`, tags every process of the exec with
an environment marker and runs the command under `timeout -s KILL`. A deadline, or a
cancelled exec, also kills every process carrying the marker (an exec the client walks
away from keeps running in Kubernetes otherwise). The image needs `/bin/sh`, `timeout`,
`cat`, `mkdir` and `kill` (coreutils or busybox). Files go through `cat` over exec.

Credentials: the user's kubeconfig (`kubeconfig`, `context`), the in-cluster service
account (`in_cluster=True`), or `host` and `token`; never recorded.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import math
import queue
import threading
import time
import uuid
from typing import Any

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import ExecResult, SandboxSpec
from nemo_gym.sandbox import limits as _limits
from nemo_gym.sandbox.remote.common import (
    OutputCap,
    RemoteInfo,
    RemoteProvider,
    TransientError,
)
from nemo_gym.sandbox.remote.shell import MARKED_KILL as _KILL
from nemo_gym.sandbox.remote.shell import READ_SCRIPT as _READ
from nemo_gym.sandbox.remote.shell import WRITE_SCRIPT as _WRITE
from nemo_gym.sandbox.remote.shell import marked_command, marked_result
from nemo_gym.sandbox.remote.shell import ulimit_flags as _ulimits

__all__ = ["KubernetesBackend", "KubernetesProvider", "pod_manifest"]

CONTAINER = "sandbox"
MARKER = "NEMO_GYM_EXEC"
NETWORK_POLICY = "nemo-gym-no-network"
NETWORK_LABEL = "nemo-gym.network"
KILL_GRACE_S = 5.0
READ_LIMIT = 256 << 20
"""The largest file `read_file` returns (the rest is an error, not a silent cut)."""


def _sdk() -> Any:
    try:
        import kubernetes
    except ImportError as exc:
        raise SandboxError(
            "the kubernetes sandbox provider needs the Kubernetes client: "
            "pip install 'nemo-gym[kubernetes]'",
            code="sandbox_unavailable",
        ) from exc
    return kubernetes


def pod_manifest(
    name: str,
    spec: SandboxSpec,
    *,
    image: str,
    labels: dict[str, str],
    timeout_s: float,
    resources: dict[str, str] | None = None,
    service_account: str | None = None,
    image_pull_secrets: tuple[str, ...] = (),
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The pod (a `core/v1` Pod object) one sandbox of `spec` runs in."""
    workdir = spec.workdir
    if not workdir.startswith("/") or workdir.rstrip("/") in ("", "/tmp", "/proc", "/dev"):
        raise ConfigError(
            f"SandboxSpec.workdir must be an absolute path of its own, got {workdir!r}"
        )
    pod_labels = dict(labels)
    if spec.network == "none":
        pod_labels[NETWORK_LABEL] = "none"
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        # Idle until deleted (or killed at activeDeadlineSeconds); execs do the work.
        "command": ["/bin/sh", "-c", 'mkdir -p "$0" && exec sleep 2147483647', workdir],
        "workingDir": workdir,
        "env": [{"name": k, "value": v} for k, v in sorted(spec.env.items())],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
        },
    }
    if resources:
        container["resources"] = {"limits": dict(resources), "requests": dict(resources)}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # The service-side lifetime: the kubelet ends the pod then, whoever holds it.
        "activeDeadlineSeconds": max(1, math.ceil(timeout_s)),
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": pod_spec,
    }


def _status_of(exc: BaseException | None) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


class KubernetesBackend:
    """The Kubernetes calls behind `KubernetesProvider` (the client is blocking: each
    call runs in a thread)."""

    name = "kubernetes"
    idempotent_create = True  # the pod name is the idempotency key

    def __init__(
        self,
        *,
        namespace: str = "default",
        image: str = "python:3.12-slim",
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        host: str | None = None,
        token: str | None = None,
        verify_ssl: bool = True,
        resources: dict[str, str] | None = None,
        service_account: str | None = None,
        image_pull_secrets: tuple[str, ...] | builtins.list[str] = (),
        node_selector: dict[str, str] | None = None,
        startup_timeout_s: float = 300.0,
        network_policy: bool = True,
    ) -> None:
        self.namespace = namespace
        self.image = image
        self.resources = dict(resources) if resources else None
        self.service_account = service_account
        self.image_pull_secrets = tuple(image_pull_secrets)
        self.node_selector = dict(node_selector) if node_selector else None
        self.startup_timeout_s = startup_timeout_s
        self.network_policy = network_policy
        self._connection = {
            "kubeconfig": kubeconfig,
            "context": context,
            "in_cluster": in_cluster,
            "host": host,
            "token": token,
            "verify_ssl": verify_ssl,
        }
        self._api: Any = None
        self._policy_made = False
        self._flags: dict[str, builtins.list[str]] = {}  # per pod: its spec's per-exec rlimits

    def _core(self) -> Any:
        if self._api is not None:
            return self._api
        k8s = _sdk()
        c = self._connection
        if c["host"]:
            configuration = k8s.client.Configuration()
            configuration.host = c["host"]
            configuration.verify_ssl = c["verify_ssl"]
            if c["token"]:
                configuration.api_key = {"authorization": c["token"]}
                configuration.api_key_prefix = {"authorization": "Bearer"}
        else:
            configuration = k8s.client.Configuration()
            try:
                if c["in_cluster"]:
                    k8s.config.load_incluster_config(client_configuration=configuration)
                else:
                    k8s.config.load_kube_config(
                        config_file=c["kubeconfig"],
                        context=c["context"],
                        client_configuration=configuration,
                    )
            except (k8s.config.ConfigException, OSError) as exc:
                where = (
                    "the in-cluster service account"
                    if c["in_cluster"]
                    else (f"kubeconfig {c['kubeconfig'] or '~/.kube/config'}")
                )
                raise ConfigError(f"kubernetes: could not load {where}: {exc}") from exc
        self._api = k8s.client.CoreV1Api(k8s.client.ApiClient(configuration))
        return self._api

    async def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except ConnectionError as exc:
            raise TransientError(f"kubernetes {what}: {exc}") from exc
        except (SandboxError, ConfigError, OSError):
            raise
        except Exception as exc:
            status = _status_of(exc)
            if status is not None and (status in (0, 429) or status >= 500):
                raise TransientError(f"kubernetes {what}: HTTP {status}: {_reason(exc)}") from exc
            import urllib3

            if isinstance(exc, urllib3.exceptions.HTTPError):
                raise TransientError(f"kubernetes {what}: {exc}") from exc
            raise SandboxError(f"kubernetes {what} failed: {_reason(exc)}") from exc

    # -- lifecycle

    async def create(
        self, spec: SandboxSpec, *, labels: dict[str, str], timeout_s: float, idempotency_key: str
    ) -> str:
        if spec.network == "loopback":
            # `RemoteProvider` makes a loopback pod with no network and adds the tunnel.
            raise ConfigError("kubernetes: the cluster itself offers no network='loopback'")
        api = self._core()
        if spec.network == "none" and self.network_policy and not self._policy_made:
            await self._ensure_network_policy()
        name = f"nemo-gym-{idempotency_key[:24].lower()}"
        manifest = pod_manifest(
            name,
            spec,
            image=spec.image or self.image,
            labels=labels,
            timeout_s=timeout_s,
            resources=self.resources,
            service_account=self.service_account,
            image_pull_secrets=self.image_pull_secrets,
            node_selector=self.node_selector,
        )
        try:
            await self._call("create", api.create_namespaced_pod, self.namespace, manifest)
        except SandboxError as exc:
            # A retry of a create whose reply was lost: the pod is ours already.
            if _status_of(exc.__cause__) != 409:
                raise
        await self._wait_running(name)
        self._flags[name] = _ulimits(_limits.resolve(spec.limits))
        return name

    async def _ensure_network_policy(self) -> None:
        """A NetworkPolicy denying all traffic to and from pods labelled
        `nemo-gym.network=none` (enforced by the cluster's network plugin)."""
        k8s = _sdk()
        networking = k8s.client.NetworkingV1Api(self._core().api_client)
        policy = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {
                "name": NETWORK_POLICY,
                "labels": {"app.kubernetes.io/managed-by": "nemo-gym"},
            },
            "spec": {
                "podSelector": {"matchLabels": {NETWORK_LABEL: "none"}},
                "policyTypes": ["Ingress", "Egress"],
            },
        }
        try:
            await self._call(
                "create", networking.create_namespaced_network_policy, self.namespace, policy
            )
        except SandboxError as exc:
            if _status_of(exc.__cause__) != 409:
                raise
        self._policy_made = True

    async def _wait_running(self, name: str) -> None:
        api = self._core()
        deadline = time.monotonic() + self.startup_timeout_s
        delay = 0.05
        while True:
            pod = await self._call("create", api.read_namespaced_pod, name, self.namespace)
            phase = pod.status.phase if pod.status else None
            if phase == "Running":
                return
            waiting = _waiting_reason(pod)
            if phase in ("Failed", "Succeeded") or waiting in (
                "ErrImagePull",
                "ImagePullBackOff",
                "InvalidImageName",
                "CreateContainerConfigError",
            ):
                await self.delete(name)
                raise SandboxError(
                    f"kubernetes: pod {name} did not start: phase {phase}, {waiting or ''} "
                    f"{(pod.status.message or '') if pod.status else ''}".strip()
                )
            if time.monotonic() > deadline:
                await self.delete(name)
                raise SandboxError(
                    f"kubernetes: pod {name} not running after {self.startup_timeout_s}s "
                    f"(phase {phase}{', ' + waiting if waiting else ''})"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def delete(self, sandbox_id: str) -> None:
        api = self._core()
        self._flags.pop(sandbox_id, None)
        try:
            await self._call(
                "delete",
                api.delete_namespaced_pod,
                sandbox_id,
                self.namespace,
                grace_period_seconds=0,
            )
        except SandboxError as exc:
            if _status_of(exc.__cause__) != 404:
                raise

    async def list(self, selector: dict[str, str]) -> builtins.list[RemoteInfo]:
        api = self._core()
        query = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        found: builtins.list[RemoteInfo] = []
        token: str | None = None
        while True:
            page = await self._call(
                "list",
                api.list_namespaced_pod,
                self.namespace,
                label_selector=query,
                limit=500,
                _continue=token,
            )
            for pod in page.items:
                found.append(RemoteInfo(pod.metadata.name, dict(pod.metadata.labels or {})))
            token = page.metadata._continue if page.metadata else None
            if not token:
                return found

    # -- exec and files

    async def exec(
        self,
        sandbox_id: str,
        argv: builtins.list[str],
        *,
        stdin: bytes,
        timeout: float,
        env: dict[str, str],
        cwd: str,
        output_bytes: int,
    ) -> ExecResult:
        marker = uuid.uuid4().hex
        flags = self._flags.get(sandbox_id, [])
        command = marked_command(
            argv, cwd=cwd, timeout=timeout, marker=marker, env=env, flags=flags
        )
        started = time.monotonic()
        out, err = OutputCap(output_bytes), OutputCap(output_bytes)
        stop = threading.Event()
        try:
            code = await asyncio.to_thread(
                self._stream, sandbox_id, command, stdin, out, err, timeout + KILL_GRACE_S, stop
            )
        except BaseException:
            stop.set()
            await asyncio.shield(self._kill(sandbox_id, marker))
            raise
        result = marked_result(
            code, timeout=timeout, elapsed=time.monotonic() - started, out=out, err=err
        )
        if result.timed_out:
            await self._kill(sandbox_id, marker)
        return result

    def _stream(
        self,
        sandbox_id: str,
        command: builtins.list[str],
        stdin: bytes,
        out: OutputCap,
        err: OutputCap,
        wait_s: float,
        stop: threading.Event,
    ) -> int | None:
        """One exec over the websocket (blocking); its exit code, None past `wait_s`."""
        k8s = _sdk()
        from kubernetes.stream import stream

        # `stream` swaps the ApiClient's `call_api` while it connects: on a client shared
        # between threads, a concurrent call (another exec, a delete) would take the
        # websocket path. Each exec gets a client of its own.
        client = k8s.client.ApiClient(self._core().api_client.configuration)
        try:
            ws = stream(
                k8s.client.CoreV1Api(client).connect_get_namespaced_pod_exec,
                sandbox_id,
                self.namespace,
                command=command,
                container=CONTAINER,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                binary=True,
                _preload_content=False,
            )
        except k8s.client.exceptions.ApiException as exc:
            client.close()
            raise TransientError(f"kubernetes exec: {_reason(exc)}") from exc
        # The client keeps a copy of all output unless told not to: a command printing
        # gigabytes must cost no more than the caps.
        ws._all = type("_Sink", (), {"write": lambda self, _: None})()
        try:
            if stdin:
                for i in range(0, len(stdin), 1 << 16):
                    ws.write_stdin(stdin[i : i + (1 << 16)])
            ws.close_channel(0)
            deadline = time.monotonic() + wait_s
            while ws.is_open() and not stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                ws.update(timeout=min(left, 0.5))
                out.add(ws.read_channel(1) or b"")
                err.add(ws.read_channel(2) or b"")
            out.add(ws.read_channel(1) or b"")
            err.add(ws.read_channel(2) or b"")
            if stop.is_set():
                return None
            status = ws.read_channel(3)
        finally:
            ws.close()
            client.close()
        return _exit_code(status)

    async def stream(
        self, sandbox_id: str, argv: builtins.list[str], *, env: dict[str, str], cwd: str
    ) -> KubernetesStream:
        """`argv` over an exec websocket of its own, stdin written and stdout read as
        they come, by a thread (the client's websocket is blocking)."""
        k8s = _sdk()
        from kubernetes.stream import stream

        command = [
            "/bin/sh",
            "-c",
            'cd "$1" || exit 126; shift; exec env "$@"',
            "nemo-gym",
            cwd,
            *(f"{k}={v}" for k, v in env.items()),
            *argv,
        ]

        def connect() -> tuple[Any, Any]:
            client = k8s.client.ApiClient(self._core().api_client.configuration)
            try:
                ws = stream(
                    k8s.client.CoreV1Api(client).connect_get_namespaced_pod_exec,
                    sandbox_id,
                    self.namespace,
                    command=command,
                    container=CONTAINER,
                    stdin=True,
                    stdout=True,
                    stderr=True,
                    tty=False,
                    binary=True,
                    _preload_content=False,
                )
            except k8s.client.exceptions.ApiException as exc:
                client.close()
                raise TransientError(f"kubernetes exec: {_reason(exc)}") from exc
            ws._all = type("_Sink", (), {"write": lambda self, _: None})()
            return ws, client

        ws, client = await asyncio.to_thread(connect)
        return KubernetesStream(ws, client, asyncio.get_running_loop())

    async def _kill(self, sandbox_id: str, marker: str) -> None:
        """Kill every process of one exec (they carry its marker), best effort."""
        try:
            await asyncio.to_thread(
                self._stream,
                sandbox_id,
                ["/bin/sh", "-c", _KILL, "kill", marker],
                b"",
                OutputCap(0),
                OutputCap(0),
                30.0,
                threading.Event(),
            )
        except Exception:  # the pod may be gone: then so are its processes
            pass

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        result = await self._plain(sandbox_id, ["/bin/sh", "-c", _WRITE, "write", path], data, 0)
        if not result.ok:
            raise OSError(
                f"kubernetes: could not write {path} (exit {result.exit_code}): "
                f"{result.stderr.strip()[:300]}"
            )

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        out = OutputCap(READ_LIMIT)
        err = OutputCap(1 << 16)
        code = await asyncio.to_thread(
            self._stream,
            sandbox_id,
            ["/bin/sh", "-c", _READ, "read", path],
            b"",
            out,
            err,
            300.0,
            threading.Event(),
        )
        if code == 44:
            raise FileNotFoundError(2, f"kubernetes: no such file: {path}", path)
        if code == 21:
            raise IsADirectoryError(21, f"kubernetes: is a directory: {path}", path)
        if code != 0:
            raise OSError(f"kubernetes: could not read {path} (exit {code}): {err.kept[:300]!r}")
        if out.truncated:
            raise OSError(f"kubernetes: {path} is larger than {READ_LIMIT} bytes")
        return bytes(out.kept)

    async def _plain(
        self, sandbox_id: str, argv: builtins.list[str], stdin: bytes, output_bytes: int
    ) -> ExecResult:
        return await self.exec(
            sandbox_id,
            argv,
            stdin=stdin,
            timeout=300.0,
            env={},
            cwd="/",
            output_bytes=max(output_bytes, 1 << 16),
        )


class KubernetesStream:
    """One exec websocket as an `ExecStream`: a thread pumps it (stdin written from a
    queue, stdout handed to the event loop as it comes, stderr dropped)."""

    POLL_S = 0.02
    """How long the pump waits for output before it looks for stdin again."""

    def __init__(self, ws: Any, client: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._ws = ws
        self._client = client
        self._loop = loop
        self._stdin: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._out: asyncio.Queue[bytes] = asyncio.Queue()
        self._stop = threading.Event()
        self._ended = False
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        ws = self._ws
        try:
            while ws.is_open() and not self._stop.is_set():
                while not self._stdin.empty():
                    ws.write_stdin(self._stdin.get_nowait())
                ws.update(timeout=self.POLL_S)
                data = ws.read_channel(1)
                if data:
                    self._loop.call_soon_threadsafe(self._out.put_nowait, bytes(data))
                ws.read_channel(2)
        except Exception:  # the connection is lost: the stream ends, as below
            pass
        finally:
            with contextlib.suppress(Exception):
                ws.close()
            self._client.close()
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads
                self._loop.call_soon_threadsafe(self._out.put_nowait, b"")

    async def send(self, data: bytes) -> None:
        if not self._thread.is_alive():
            raise SandboxError("kubernetes exec: the stream has ended")
        self._stdin.put(data)

    async def receive(self) -> bytes:
        if self._ended:
            return b""
        data = await self._out.get()
        self._ended = not data
        return data

    async def aclose(self) -> None:
        # Closing the websocket ends the command's stdin: the tunnel's relay exits on it.
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 5)


def _exit_code(status: bytes | str | None) -> int:
    """The exit code in the exec's status channel (a `meta/v1` Status)."""
    if not status:
        raise TransientError("kubernetes exec: the stream closed without a status")
    body = json.loads(status)
    if body.get("status") == "Success":
        return 0
    for cause in (body.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause["message"])
    raise SandboxError(f"kubernetes exec failed: {body.get('message') or body}")


def _waiting_reason(pod: Any) -> str | None:
    for status in (pod.status.container_statuses or []) if pod.status else []:
        waiting = status.state.waiting if status.state else None
        if waiting is not None and waiting.reason:
            return str(waiting.reason)
    return None


def _reason(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)[:500]
        except (ValueError, AttributeError):
            return str(body)[:500]
    return f"{type(exc).__name__}: {exc}"


class KubernetesProvider(RemoteProvider):
    """Pods as sandboxes (see the module doc). Options: `namespace`, `image` (default
    `python:3.12-slim`), connection (`kubeconfig`, `context`, `in_cluster`, `host`,
    `token`, `verify_ssl`), pod shape (`resources` as pod limits and requests, e.g.
    `{"cpu": "1", "memory": "2Gi"}`, `service_account`, `image_pull_secrets`,
    `node_selector`), `startup_timeout_s`, `network_policy`; and the shared ones of
    `RemoteProvider` (labels, `timeout_s`, caps, rate, retries, pool)."""

    def __init__(
        self,
        *,
        namespace: str = "default",
        image: str = "python:3.12-slim",
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        host: str | None = None,
        token: str | None = None,
        verify_ssl: bool = True,
        resources: dict[str, str] | None = None,
        service_account: str | None = None,
        image_pull_secrets: tuple[str, ...] | list[str] = (),
        node_selector: dict[str, str] | None = None,
        startup_timeout_s: float = 300.0,
        network_policy: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(
            KubernetesBackend(
                namespace=namespace,
                image=image,
                kubeconfig=kubeconfig,
                context=context,
                in_cluster=in_cluster,
                host=host,
                token=token,
                verify_ssl=verify_ssl,
                resources=resources,
                service_account=service_account,
                image_pull_secrets=image_pull_secrets,
                node_selector=node_selector,
                startup_timeout_s=startup_timeout_s,
                network_policy=network_policy,
            ),
            **options,
        )
