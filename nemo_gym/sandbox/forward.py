"""The in-sandbox half of `network="loopback"`: 127.0.0.1:PORT inside, a unix socket out.

A standalone program (standard library only, no nemo_gym import), run by the providers
as the sandbox's first process::

    python -I -c <this source> '<json: [[port, socket path], ...]>' -- <argv...>

It binds each 127.0.0.1:PORT in the sandbox's own network namespace (which has no other
interface), then detaches a relay (forked twice, so it belongs to the sandbox's init
and never to the worker, whose `reset` kills its own descendants) and `exec`s argv (the
worker, or a container's keep-alive). The sockets are bound before the exec, so the
ports are open by the time the sandbox says it is ready. Each accepted connection is
relayed, both ways, to the unix socket bind-mounted from the host, whose other end
(`nemo_gym.sandbox.network.PortRelay`) connects to the host's 127.0.0.1:PORT. Nothing
else of the host's network is reachable: there is no route out of the namespace.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys

CHUNK = 1 << 16
READY = "/tmp/.nemo_gym_forward_ready"
"""Written once the ports are bound (a container provider waits for it before use)."""


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy `reader` to `writer` until EOF, then half-close it (both relays use this)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            writer.close()


async def _relay(path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(path)
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
    finally:
        writer.close()
        up_writer.close()


async def _serve(listeners: list[tuple[socket.socket, str]]) -> None:
    servers = []
    for sock, path in listeners:

        async def handle(
            r: asyncio.StreamReader, w: asyncio.StreamWriter, path: str = path
        ) -> None:
            await _relay(path, r, w)

        servers.append(await asyncio.start_server(handle, sock=sock))
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main() -> None:
    pairs = json.loads(sys.argv[1])
    if sys.argv[2] != "--" or len(sys.argv) < 4:
        raise SystemExit("usage: forward '<[[port, socket], ...]>' -- argv...")
    argv = sys.argv[3:]
    listeners = []
    for port, path in pairs:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", int(port)))
        sock.listen(256)
        listeners.append((sock, str(path)))
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            asyncio.run(_serve(listeners))
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    for sock, _ in listeners:
        sock.close()  # the relay holds them; the program exec'd next must not
    try:
        with open(READY, "w") as marker:
            marker.write(str(len(listeners)))
    except OSError:
        pass  # a read-only /tmp: the provider's own handshake must do
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
