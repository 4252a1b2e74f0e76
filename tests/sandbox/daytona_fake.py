"""A loopback fake of Daytona: its control-plane REST API and each sandbox's toolbox,
written from the SDK's generated clients (`daytona_api_client_async` and
`daytona_toolbox_api_client_async`, generated from Daytona's OpenAPI descriptions): the
requests are parsed with, and the replies built from, those clients' own models, so
the real SDK runs unchanged against it.

- `POST /api/sandbox` (`CreateSandbox` -> `Sandbox`, state `started`; a taken name is
  409, as Daytona's names are unique per organisation), `GET /api/sandbox/{idOrName}`,
  `GET /api/sandbox?labels={json}` (`ListSandboxesResponse`, one page),
  `DELETE /api/sandbox/{idOrName}` (404 when gone).
- the toolbox, at `{url}/toolbox/{sandboxId}/...`: `POST /process/execute`
  (`ExecuteRequest` -> `ExecuteResponse`: the command run by `sh -c`, stdout and stderr
  merged, as the daemon does), `POST /files/bulk-upload` (multipart, parents created),
  `POST /files/bulk-download` (a multipart reply: a `file` part per path, or an `error`
  part with the daemon's JSON error, `FILE_NOT_FOUND` for a missing file).

Each sandbox is a `local` (bubblewrap) sandbox, so commands really run, isolated.
Not served: snapshots and image builds (an image is recorded, not built), volumes,
sessions, PTY, previews, the socket.io event stream (the SDK falls back to polling).
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

from daytona_api_client_async.models import (
    CreateSandbox,
    ListSandboxesResponse,
    Sandbox,
    SandboxListItem,
    SandboxState,
)
from daytona_toolbox_api_client_async.models import (
    ExecuteRequest,
    ExecuteResponse,
    FilesDownloadRequest,
)
from starlette.requests import Request

from nemo_gym.records import ResourceLimits, SandboxSpec
from nemo_gym.sandbox.base import WorkerSandbox
from tests.sandbox.remote_service import FakeService, send_json


@dataclass
class FakeSandbox:
    id: str
    box: WorkerSandbox
    request: CreateSandbox
    created_at: datetime.datetime

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.request.labels or {})


class DaytonaFake(FakeService):
    """The fake service (`fail_next` keys: `"METHOD first-path-segment"`); `start()` serves it."""

    name = "Daytona"

    @property
    def api_url(self) -> str:
        return f"{self.url}/api"

    # -- ASGI

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        path: str = scope["path"]
        method: str = scope["method"]
        self.requests.append((method, path))
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        key = f"{method} {parts[1] if len(parts) > 1 else ''}"
        if self.fail_next.get(key, 0) > 0:
            self.fail_next[key] -= 1
            await send_json(send, 429, _error(429, "ThrottlerException: Too Many Requests"))
            return
        if parts[:2] == ["api", "sandbox"]:
            await self._control(request, send, method, parts[2:])
        elif parts[0] == "toolbox" and len(parts) >= 3:
            await self._toolbox(request, send, method, parts[1], "/".join(parts[2:]))
        else:
            await send_json(send, 404, _error(404, f"Cannot {method} {path}"))

    async def _control(self, request: Request, send: Any, method: str, rest: list[str]) -> None:
        if not rest and method == "POST":
            await self._create(send, CreateSandbox.from_json((await request.body()).decode()))
        elif not rest and method == "GET":
            await self._list(send, request.query_params.get("labels"))
        elif len(rest) == 1 and method in ("GET", "DELETE"):
            sandbox = self._find(rest[0])
            if sandbox is None:
                await send_json(
                    send, 404, _error(404, f"Sandbox with ID or name {rest[0]} not found")
                )
            elif method == "GET":
                await send_json(send, 200, self._dto(sandbox).to_dict())
            else:
                del self.sandboxes[sandbox.id]
                await sandbox.box.aclose()
                dto = self._dto(sandbox)
                dto.state = SandboxState.DESTROYING
                await send_json(send, 200, dto.to_dict())
        else:
            await send_json(
                send, 404, _error(404, f"Cannot {method} /api/sandbox/{'/'.join(rest)}")
            )

    def _find(self, id_or_name: str) -> FakeSandbox | None:
        if id_or_name in self.sandboxes:
            return self.sandboxes[id_or_name]
        return next((s for s in self.sandboxes.values() if s.request.name == id_or_name), None)

    async def _create(self, send: Any, body: CreateSandbox) -> None:
        if body.name and self._find(body.name) is not None:
            await send_json(send, 409, _error(409, f"Sandbox with name {body.name} already exists"))
            return
        spec = SandboxSpec(
            env=dict(body.env or {}),
            limits=ResourceLimits(processes=256),
            network="none" if body.network_block_all else "host",
        )
        box = await self._local.create(spec)
        self.created += 1
        sandbox_id = str(uuid.UUID(int=next(self._ids)))
        body.name = body.name or sandbox_id
        sandbox = FakeSandbox(sandbox_id, box, body, datetime.datetime.now(datetime.UTC))
        self.sandboxes[sandbox_id] = sandbox
        if self.lose_create_replies > 0:
            self.lose_create_replies -= 1
            await send_json(send, 502, _error(502, "Bad Gateway"))
            return
        await send_json(send, 200, self._dto(sandbox).to_dict())

    def _dto(self, sandbox: FakeSandbox) -> Sandbox:
        body = sandbox.request
        destroy_at = None
        if body.ttl_minutes:
            destroy_at = sandbox.created_at + datetime.timedelta(minutes=body.ttl_minutes)
        return Sandbox(
            id=sandbox.id,
            organization_id="fake-org",
            name=body.name or sandbox.id,
            user=body.user or "daytona",
            env=dict(body.env or {}),
            labels=sandbox.labels,
            public=bool(body.public),
            network_block_all=bool(body.network_block_all),
            kvm=False,
            target=body.target or "us",
            cpu=body.cpu or 1,
            gpu=body.gpu or 0,
            memory=body.memory or 1,
            disk=body.disk or 3,
            state=SandboxState.STARTED,
            auto_stop_interval=body.auto_stop_interval,
            auto_delete_interval=body.auto_delete_interval,
            auto_destroy_at=destroy_at.isoformat() if destroy_at else None,
            created_at=sandbox.created_at.isoformat(),
            toolbox_proxy_url=f"{self.url}/toolbox",
        )

    async def _list(self, send: Any, labels_json: str | None) -> None:
        wanted: dict[str, str] = json.loads(labels_json) if labels_json else {}
        items = []
        for sandbox in self.sandboxes.values():
            if any(sandbox.labels.get(k) != v for k, v in wanted.items()):
                continue
            dto = self._dto(sandbox).to_dict()
            items.append(SandboxListItem.from_dict(dto))
        await send_json(send, 200, ListSandboxesResponse(items=items, next_cursor=None).to_dict())

    # -- the toolbox

    async def _toolbox(
        self, request: Request, send: Any, method: str, sandbox_id: str, route: str
    ) -> None:
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is None:
            await send_json(send, 404, _error(404, f"sandbox {sandbox_id} not found"))
        elif route == "process/execute" and method == "POST":
            body = ExecuteRequest.from_json((await request.body()).decode())
            result = await sandbox.box.exec(
                ["sh", "-c", body.command],
                env=dict(body.envs or {}),
                cwd=body.cwd or None,
                timeout=float(body.timeout or 3600),
            )
            if result.timed_out:
                await send_json(send, 408, _error(408, "command execution timeout"))
                return
            reply = ExecuteResponse(
                exit_code=result.exit_code, result=result.stdout + result.stderr
            )
            await send_json(send, 200, reply.to_dict())
        elif route == "files/bulk-upload" and method == "POST":
            form = await request.form(max_part_size=1 << 30)
            for field, value in form.multi_items():
                if field.endswith(".file") and not isinstance(value, str):
                    path = form.get(field.removesuffix(".file") + ".path") or value.filename
                    await sandbox.box.write_file(str(path), await value.read())
            await send_json(send, 200, None)
        elif route == "files/bulk-download" and method == "POST":
            wanted = FilesDownloadRequest.from_json((await request.body()).decode())
            await self._download(send, sandbox, list(wanted.paths if wanted else []))
        else:
            await send_json(send, 404, _error(404, f"Cannot {method} /{route}"))

    async def _download(self, send: Any, sandbox: FakeSandbox, paths: list[str]) -> None:
        boundary = uuid.uuid4().hex
        body = bytearray()
        for path in paths:
            quoted = path.replace('"', "%22")
            try:
                data = await sandbox.box.read_file(path)
                name, kind = "file", "application/octet-stream"
            except FileNotFoundError:
                data = json.dumps(
                    {
                        "message": f"file not found: {path}",
                        "statusCode": 404,
                        "code": "FILE_NOT_FOUND",
                        "source": "DAYTONA_DAEMON",
                    }
                ).encode()
                name, kind = "error", "application/json"
            body += (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                f'filename="{quoted}"\r\nContent-Type: {kind}\r\n\r\n'
            ).encode()
            body += data + b"\r\n"
        body += f"--{boundary}--\r\n".encode()
        content_type = f"multipart/form-data; boundary={boundary}".encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", content_type)],
            }
        )
        await send({"type": "http.response.body", "body": bytes(body)})


def _error(status: int, message: str) -> dict[str, Any]:
    return {"statusCode": status, "message": message, "error": message.split(":")[0]}
