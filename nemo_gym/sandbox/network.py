"""`SandboxSpec(network="loopback", ports=...)`: the host side, shared by the providers.

A sandbox in this mode has a network namespace of its own (only its loopback) in which
`forward.py` listens on 127.0.0.1:PORT for each allowed port and relays connections to a
unix socket. `PortRelay` owns those sockets on the host, in a private directory the
provider bind-mounts at `MOUNT` inside, and relays each connection to the host's
127.0.0.1:PORT. So the sandbox reaches exactly the listed host ports, at the addresses
the host uses (a URL works unchanged inside), and nothing else: no other host port, no
other host, no outside.

The relay runs in the event loop that started the sandbox, and closes with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
from functools import cache, partial
from pathlib import Path

from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox.forward import pump

__all__ = ["MOUNT", "PortRelay", "forward_argv", "forward_source"]

log = logging.getLogger(__name__)

MOUNT = "/run/nemo_gym/net"
"""Where the relay's socket directory appears inside a sandbox."""


@cache
def forward_source() -> str:
    """The in-sandbox forwarder's source (run with `python -I -c`)."""
    return (Path(__file__).parent / "forward.py").read_text()


def forward_argv(python: str, ports: tuple[int, ...], argv: list[str]) -> list[str]:
    """`argv` started behind the forwarder of `ports` (sockets under `MOUNT`)."""
    pairs = [[port, f"{MOUNT}/{port}.sock"] for port in ports]
    return [python, "-I", "-c", forward_source(), json.dumps(pairs), "--", *argv]


class PortRelay:
    """Unix sockets (one per port, in `directory`) relayed to the host's 127.0.0.1:PORT."""

    def __init__(self, ports: tuple[int, ...]) -> None:
        self.ports = ports
        self.directory = ""
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def for_spec(cls, spec: SandboxSpec) -> PortRelay | None:
        """A started relay for a `network="loopback"` spec, else None."""
        if spec.network != "loopback":
            return None
        return await cls(spec.ports).start()

    async def start(self) -> PortRelay:
        self.directory = tempfile.mkdtemp(prefix="nemo_gym_net_")
        os.chmod(self.directory, 0o755)
        try:
            for port in self.ports:
                path = os.path.join(self.directory, f"{port}.sock")
                server = await asyncio.start_unix_server(partial(self._accept, port), path)
                os.chmod(path, 0o777)  # the sandbox's user may be another uid
                self._servers.append(server)
        except BaseException:
            await self.aclose()
            raise
        return self

    def _accept(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.ensure_future(self._relay(port, reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relay(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            log.debug("sandbox connection to 127.0.0.1:%d refused: %s", port, exc)
            writer.close()
            return
        try:
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        finally:
            writer.close()
            up_writer.close()

    async def aclose(self) -> None:
        """Stop relaying and remove the sockets; idempotent."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        if self.directory:
            await asyncio.to_thread(shutil.rmtree, self.directory, True)
            self.directory = ""
