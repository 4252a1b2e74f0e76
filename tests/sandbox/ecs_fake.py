"""A loopback fake of the ECS API (the control plane a Fargate sandbox needs), for the
`ecs` backend driven through the real `boto3` client.

Written from botocore's own service model of ECS, which is the API's description: the
JSON 1.1 protocol (`X-Amz-Target: AmazonEC2ContainerServiceV20141113.<Operation>`),
every request validated against the operation's input shape with botocore's own
validator (a request the real service would refuse as malformed is refused here),
errors as `{"__type": ..., "message": ...}`. Operations: `RunTask` (Fargate, one
task, `clientToken` idempotency, tags), `DescribeTasks` (with `include=["TAGS"]`),
`StopTask`, `ListTasks` (`startedBy`, `desiredStatus`, pages). A task goes
PROVISIONING -> RUNNING on its first describe, and STOPPED when stopped or when its
container's command `sleep N` ends. No container runs: there is no exec here.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from botocore.session import get_session
from botocore.validate import ParamValidator

from tests.sandbox.remote_service import LoopbackServer

ACCOUNT = "123456789012"
REGION = "us-east-1"
TASK_CPU = "1024"
TASK_MEMORY = "2048"


@dataclass
class FakeTask:
    arn: str
    cluster: str
    params: dict[str, Any]
    tags: list[dict[str, str]]
    last_status: str = "PROVISIONING"
    desired_status: str = "RUNNING"
    stop_code: str | None = None
    stopped_reason: str | None = None
    created: float = field(default_factory=lambda: datetime.datetime.now(datetime.UTC).timestamp())
    timer: asyncio.TimerHandle | None = None

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "taskArn": self.arn,
            "clusterArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{self.cluster}",
            "taskDefinitionArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/"
            f"{self.params['taskDefinition']}",
            "lastStatus": self.last_status,
            "desiredStatus": self.desired_status,
            "launchType": "FARGATE",
            "cpu": TASK_CPU,
            "memory": TASK_MEMORY,
            "startedBy": self.params.get("startedBy", ""),
            "createdAt": self.created,
            "enableExecuteCommand": bool(self.params.get("enableExecuteCommand")),
            "overrides": self.params.get("overrides", {}),
            "tags": self.tags,
        }
        if self.stop_code:
            out["stopCode"] = self.stop_code
            out["stoppedReason"] = self.stopped_reason or ""
        return out


class EcsFake:
    """The fake service; `start()` serves it on 127.0.0.1 in a thread of its own."""

    def __init__(self) -> None:
        self.model = get_session().get_service_model("ecs")
        self.tasks: dict[str, FakeTask] = {}
        self.tokens: dict[str, str] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail_next: dict[str, int] = {}
        """Operation name: answer ThrottlingException that many times."""
        self.lose_run_replies = 0
        """RunTasks that act and then answer 500 ServerException, as when a reply is lost."""
        self._ids = itertools.count(1)
        self.url = ""
        self._serving = LoopbackServer(self, name="ECS")

    def start(self) -> str:
        self.url = self._serving.start()
        return self.url

    def stop(self) -> None:
        self._serving.stop()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        prefix, _, operation = headers.get("x-amz-target", "").partition(".")
        if (
            prefix != self.model.metadata["targetPrefix"]
            or operation not in self.model.operation_names
        ):
            await _error(
                send, 400, "UnknownOperationException", f"unknown target {prefix}.{operation}"
            )
            return
        if "authorization" not in headers or "AWS4-HMAC-SHA256" not in headers["authorization"]:
            await _error(send, 400, "MissingAuthenticationTokenException", "request is not signed")
            return
        params = json.loads(body or b"{}")
        self.calls.append((operation, params))
        report = ParamValidator().validate(
            params, self.model.operation_model(operation).input_shape
        )
        if report.has_errors():
            await _error(send, 400, "InvalidParameterException", report.generate_report())
            return
        if self.fail_next.get(operation, 0) > 0:
            self.fail_next[operation] -= 1
            await _error(send, 400, "ThrottlingException", "Rate exceeded")
            return
        handler = getattr(self, f"_{operation}", None)
        if handler is None:
            await _error(send, 400, "UnsupportedFeatureException", f"{operation} is not faked")
            return
        await handler(send, params)

    async def _RunTask(self, send: Any, params: dict[str, Any]) -> None:
        if params.get("launchType") != "FARGATE":
            await _error(send, 400, "InvalidParameterException", "the fake runs FARGATE only")
            return
        if "networkConfiguration" not in params:
            await _error(
                send, 400, "InvalidParameterException",
                "Network Configuration must be provided when networkMode 'awsvpc' is specified.",
            )  # fmt: skip
            return
        token = params.get("clientToken")
        if token and token in self.tokens:
            await _json(send, {"tasks": [self.tasks[self.tokens[token]].json()], "failures": []})
            return
        cluster = params.get("cluster", "default")
        arn = f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/{cluster}/{next(self._ids):032x}"
        task = FakeTask(arn, cluster, params, list(params.get("tags") or []))
        self.tasks[arn] = task
        if token:
            self.tokens[token] = arn
        command = next(
            (o.get("command") for o in params.get("overrides", {}).get("containerOverrides", [])),
            None,
        )
        if command and command[0] == "sleep":
            loop = asyncio.get_running_loop()
            task.timer = loop.call_later(
                float(command[1]), self._stopped, task, "EssentialContainerExited",
                "Essential container in task exited",
            )  # fmt: skip
        if self.lose_run_replies > 0:
            self.lose_run_replies -= 1
            await _error(send, 500, "ServerException", "Service unavailable")
            return
        await _json(send, {"tasks": [task.json()], "failures": []})

    def _stopped(self, task: FakeTask, code: str, reason: str) -> None:
        task.last_status = task.desired_status = "STOPPED"
        task.stop_code, task.stopped_reason = code, reason
        if task.timer is not None:
            task.timer.cancel()

    async def _DescribeTasks(self, send: Any, params: dict[str, Any]) -> None:
        tasks, failures = [], []
        for arn in params["tasks"]:
            task = self.tasks.get(arn)
            if task is None:
                failures.append({"arn": arn, "reason": "MISSING"})
                continue
            if task.last_status == "PROVISIONING":
                task.last_status = "RUNNING"
                out = task.json()
                out["lastStatus"] = "PROVISIONING"  # this read still sees it starting
            else:
                out = task.json()
            if "TAGS" not in (params.get("include") or []):
                out.pop("tags")
            tasks.append(out)
        await _json(send, {"tasks": tasks, "failures": failures})

    async def _StopTask(self, send: Any, params: dict[str, Any]) -> None:
        task = self.tasks.get(params["task"])
        if task is None:
            await _error(
                send, 400, "InvalidParameterException", "The referenced task was not found."
            )
            return
        self._stopped(task, "UserInitiated", params.get("reason", ""))
        await _json(send, {"task": task.json()})

    async def _ListTasks(self, send: Any, params: dict[str, Any]) -> None:
        cluster = params.get("cluster", "default")
        desired = params.get("desiredStatus", "RUNNING")
        arns = [
            t.arn
            for t in self.tasks.values()
            if t.cluster == cluster
            and t.desired_status == desired
            and (not params.get("startedBy") or t.params.get("startedBy") == params["startedBy"])
        ]
        start = int(params.get("nextToken") or 0)
        size = int(params.get("maxResults") or 100)
        reply: dict[str, Any] = {"taskArns": arns[start : start + size]}
        if start + size < len(arns):
            reply["nextToken"] = str(start + size)
        await _json(send, reply)


async def _json(send: Any, payload: Any, status: int = 200) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/x-amz-json-1.1")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _error(send: Any, status: int, kind: str, message: str) -> None:
    await _json(send, {"__type": kind, "message": message}, status)
