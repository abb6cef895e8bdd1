"""Fault injection on the wire: a TCP proxy in front of the moto server that can be cut.

The worker is pointed at the proxy (``AWS_ENDPOINT_URL``); cutting it aborts every open
connection and refuses new ones, as an endpoint that went down would. Restoring listens
on the same port again. Loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit


class OutageProxy:
    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._target_host = parts.hostname or "127.0.0.1"
        self._target_port = parts.port or 80
        self._server: asyncio.Server | None = None
        self._port = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self.cuts = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> str:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self._port, reuse_address=True
        )
        self._port = self._server.sockets[0].getsockname()[1]
        return self.endpoint

    async def cut(self) -> None:
        """The endpoint goes down: open connections are reset, new ones refused."""
        self.cuts += 1
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            await self._server.wait_closed()
            self._server = None

    async def restore(self) -> None:
        await self.start()

    async def close(self) -> None:
        await self.cut()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self._target_host, self._target_port
            )
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    with contextlib.suppress(Exception):
        writer.write_eof()
