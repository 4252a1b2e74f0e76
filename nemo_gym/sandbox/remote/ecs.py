"""`ecs`: sandboxes as AWS ECS Fargate tasks through `boto3` (`pip install 'nemo-gym[ecs]'`):
the control plane only, so far.

What works: starting a task (`RunTask` on Fargate, the run's labels as task tags, the
create's idempotency key as `clientToken`, the container's command `sleep timeout_s` so
the task stops itself then: ECS has no lifetime limit of its own), waiting for it to
run, its billing rates (the task's vCPUs and memory: Fargate bills both by the second),
stopping it, and finding tasks by tag (`ListTasks` + `DescribeTasks` with tags) to reap
a killed trainer's. `reap()` and `gym sandbox reap ecs` use it.

What does not yet: exec and files. On ECS they go through `ExecuteCommand`, which opens
an SSM Session Manager session whose data channel (a binary, acknowledged, sequenced
message protocol over a websocket, spoken by AWS's `session-manager-plugin`) has no
Python client in the SDK, no exit codes of its own and no published description a fake
could be written from. Until then `create` raises `SandboxError` (code
`sandbox_unavailable`) before starting anything.

Credentials are boto3's (environment, profile, instance role); never recorded.
"""

from __future__ import annotations

import asyncio
import builtins
import math
import time
from typing import Any

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import ExecResult, SandboxSpec
from nemo_gym.sandbox.remote.common import RemoteInfo, RemoteProvider, TransientError

__all__ = ["EcsBackend", "EcsProvider"]

STARTED_BY = "nemo-gym"
_TRANSIENT = {
    "ThrottlingException",
    "ServerException",
    "ServiceUnavailableException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
}
EXEC_UNAVAILABLE = (
    "ecs: exec and files are not available yet: ECS runs them through ExecuteCommand, an "
    "SSM Session Manager session whose data channel nemo_gym does not speak; this "
    "provider starts, stops and reaps tasks only (see docs/sandbox-providers.md)"
)


def _sdk() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise SandboxError(
            "the ecs sandbox provider needs boto3: pip install 'nemo-gym[ecs]'",
            code="sandbox_unavailable",
        ) from exc
    return boto3


class EcsBackend:
    """The ECS calls behind `EcsProvider` (boto3 is blocking: each call runs in a thread)."""

    name = "ecs"
    idempotent_create = True  # RunTask's clientToken

    def __init__(
        self,
        *,
        cluster: str,
        task_definition: str,
        container: str,
        subnets: tuple[str, ...] | list[str] = (),
        security_groups: tuple[str, ...] | list[str] = (),
        platform_version: str | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        startup_timeout_s: float = 600.0,
        client: Any = None,
    ) -> None:
        self.cluster = cluster
        self.task_definition = task_definition
        self.container = container
        self.subnets = builtins.list(subnets)
        self.security_groups = builtins.list(security_groups)
        self.platform_version = platform_version
        self.startup_timeout_s = startup_timeout_s
        self._region = region
        self._endpoint_url = endpoint_url
        self._client = client

    def _ecs(self) -> Any:
        if self._client is None:
            self._client = _sdk().client(
                "ecs", region_name=self._region, endpoint_url=self._endpoint_url
            )
        return self._client

    async def _call(self, what: str, operation: str, **params: Any) -> Any:
        client = self._ecs()
        try:
            return await asyncio.to_thread(getattr(client, operation), **params)
        except Exception as exc:
            from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

            if isinstance(exc, ConnectionError | HTTPClientError):
                raise TransientError(f"ecs {what}: {exc}") from exc
            if isinstance(exc, ClientError):
                code = exc.response.get("Error", {}).get("Code", "")
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code in _TRANSIENT or status >= 500:
                    raise TransientError(f"ecs {what}: {code}: {exc}") from exc
                raise SandboxError(f"ecs {what} failed: {code}: {exc}") from exc
            raise

    async def create(
        self, spec: SandboxSpec, *, labels: dict[str, str], timeout_s: float, idempotency_key: str
    ) -> str:
        if not self.subnets:
            raise ConfigError("ecs: subnets must name at least one subnet (awsvpc networking)")
        if spec.network == "loopback":
            raise ConfigError(
                "ecs: network='loopback' is not offered (a task cannot reach this host's "
                "127.0.0.1); use 'none' or 'host'"
            )
        # Fargate has no lifetime limit: the essential container's command is a sleep of
        # it, so the task stops itself (and its billing) then, whoever holds it.
        override: dict[str, Any] = {
            "name": self.container,
            "command": ["sleep", str(max(1, math.ceil(timeout_s)))],
            "environment": [{"name": k, "value": v} for k, v in sorted(spec.env.items())],
        }
        params: dict[str, Any] = {
            "cluster": self.cluster,
            "taskDefinition": spec.image or self.task_definition,
            "launchType": "FARGATE",
            "count": 1,
            "startedBy": STARTED_BY,
            "clientToken": idempotency_key[:64],
            "enableExecuteCommand": True,
            "networkConfiguration": {
                "awsvpcConfiguration": {
                    "subnets": self.subnets,
                    "securityGroups": self.security_groups,
                    # "none" gets no public IP; whether the subnet routes anywhere else
                    # (a NAT gateway) is the VPC's, which nemo_gym cannot see.
                    "assignPublicIp": "ENABLED" if spec.network == "host" else "DISABLED",
                }
            },
            "overrides": {"containerOverrides": [override]},
            "tags": [{"key": k, "value": v} for k, v in sorted(labels.items())],
            "propagateTags": "TASK_DEFINITION",
        }
        if self.platform_version:
            params["platformVersion"] = self.platform_version
        reply = await self._call("create", "run_task", **params)
        failures = reply.get("failures") or []
        tasks = reply.get("tasks") or []
        if failures or not tasks:
            raise SandboxError(f"ecs: RunTask started no task: {failures}")
        arn = str(tasks[0]["taskArn"])
        await self._wait_running(arn)
        return arn

    async def _describe(self, arn: str) -> dict[str, Any] | None:
        reply = await self._call(
            "describe", "describe_tasks", cluster=self.cluster, tasks=[arn], include=["TAGS"]
        )
        tasks = reply.get("tasks") or []
        return tasks[0] if tasks else None

    async def _wait_running(self, arn: str) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        delay = 0.05
        while True:
            task = await self._describe(arn)
            status = task.get("lastStatus") if task else None
            if status == "RUNNING":
                return
            if task is None or status in ("DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED"):
                await self.delete(arn)
                reason = (task or {}).get("stoppedReason") or "gone"
                raise SandboxError(f"ecs: task {arn} did not start: {status}: {reason}")
            if time.monotonic() > deadline:
                await self.delete(arn)
                raise SandboxError(
                    f"ecs: task {arn} not running after {self.startup_timeout_s}s ({status})"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def rates(self, sandbox_id: str) -> dict[str, float]:
        """Fargate bills a task per second of its vCPUs and memory (GB): what it has."""
        task = await self._describe(sandbox_id)
        if task is None:
            return {}
        return {
            "vcpu": int(task.get("cpu") or 0) / 1024,
            "memory_gib": int(task.get("memory") or 0) / 1024,
        }

    async def delete(self, sandbox_id: str) -> None:
        try:
            await self._call(
                "delete",
                "stop_task",
                cluster=self.cluster,
                task=sandbox_id,
                reason="nemo-gym: sandbox closed",
            )
        except SandboxError as exc:
            # A task already stopped and gone is deleted.
            if "InvalidParameterException" not in str(exc) or "not found" not in str(exc):
                raise

    async def list(self, selector: dict[str, str]) -> builtins.list[RemoteInfo]:
        arns: builtins.list[str] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {
                "cluster": self.cluster,
                "startedBy": STARTED_BY,
                "desiredStatus": "RUNNING",
                "maxResults": 100,
            }
            if token:
                params["nextToken"] = token
            page = await self._call("list", "list_tasks", **params)
            arns += page.get("taskArns") or []
            token = page.get("nextToken")
            if not token:
                break
        found: builtins.list[RemoteInfo] = []
        for i in range(0, len(arns), 100):  # DescribeTasks takes at most 100
            reply = await self._call(
                "list",
                "describe_tasks",
                cluster=self.cluster,
                tasks=arns[i : i + 100],
                include=["TAGS"],
            )
            for task in reply.get("tasks") or []:
                tags = {t["key"]: t["value"] for t in task.get("tags") or []}
                if all(tags.get(k) == v for k, v in selector.items()):
                    found.append(RemoteInfo(str(task["taskArn"]), tags))
        return found

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
        raise SandboxError(EXEC_UNAVAILABLE, code="sandbox_unavailable")

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        raise SandboxError(EXEC_UNAVAILABLE, code="sandbox_unavailable")

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        raise SandboxError(EXEC_UNAVAILABLE, code="sandbox_unavailable")


class EcsProvider(RemoteProvider):
    """ECS Fargate tasks (see the module doc: reaping works, sandboxes do not yet).

    Options: `cluster`, `task_definition` (family[:revision] or ARN; `SandboxSpec.image`
    overrides it), `container` (the essential container's name), `subnets`,
    `security_groups`, `platform_version`, `region`, `endpoint_url`,
    `startup_timeout_s`; and the shared ones of `RemoteProvider`.
    """

    def __init__(
        self,
        *,
        cluster: str = "default",
        task_definition: str = "nemo-gym-sandbox",
        container: str = "sandbox",
        subnets: tuple[str, ...] | list[str] = (),
        security_groups: tuple[str, ...] | list[str] = (),
        platform_version: str | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        startup_timeout_s: float = 600.0,
        **options: Any,
    ) -> None:
        super().__init__(
            EcsBackend(
                cluster=cluster,
                task_definition=task_definition,
                container=container,
                subnets=subnets,
                security_groups=security_groups,
                platform_version=platform_version,
                region=region,
                endpoint_url=endpoint_url,
                startup_timeout_s=startup_timeout_s,
            ),
            **options,
        )

    async def create(self, spec: SandboxSpec | None = None) -> Any:
        """Refused before anything starts: exec is not available on ECS yet."""
        raise SandboxError(EXEC_UNAVAILABLE, code="sandbox_unavailable")
