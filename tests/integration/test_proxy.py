"""The one TCP proxy (``localaws.proxy``): it delays every exchange, not every connection,
and a cut resets what it carries and refuses new connections until it is restored.

A keep-alive HTTP server on loopback answers several requests on one connection; the
proxy's sleep is recorded instead of waited, so the test asserts the exact delays it chose.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from localaws.proxy import TcpProxy, parse_route

pytestmark = pytest.mark.integration


class KeepAliveServer:
    """HTTP/1.1 on 127.0.0.1: answers each ``GET`` on a connection with ``ok<n>``."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.url = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self.url

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                self.requests += 1
                body = f"ok{self.requests}".encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[KeepAliveServer]:
    server = KeepAliveServer()
    await server.start()
    yield server
    await server.close()


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bytes:
    writer.write(f"GET /{n} HTTP/1.1\r\nHost: local\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    return await reader.readexactly(length)


class Sleeps:
    """The proxy's sleep, recorded instead of waited (``seen`` is set at the first)."""

    def __init__(self) -> None:
        self.slept: list[float] = []
        self.seen = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.seen.set()


async def test_each_request_on_a_kept_alive_connection_is_delayed_once_each_way(
    upstream: KeepAliveServer,
) -> None:
    sleep = Sleeps()
    proxy = TcpProxy(upstream.url, 0.012, sleep=sleep)
    host_port = (await proxy.start()).removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host_port[0], int(host_port[1]))
    try:
        answers = [await exchange(reader, writer, n) for n in range(3)]
    finally:
        writer.close()
        await proxy.close()
    assert answers == [b"ok1", b"ok2", b"ok3"]
    assert (upstream.connections, proxy.connections) == (1, 1)  # one connection kept alive
    assert proxy.exchanges == 3
    assert sleep.slept == [0.006] * 6  # half the round trip before each request and response


async def test_a_request_body_in_several_writes_is_one_exchange(upstream: KeepAliveServer) -> None:
    """Bytes the client sends before the answer begins belong to the same request: the
    second part is written only once the proxy has read the first on its own (it began the
    exchange: its delay was asked for), so the two are two reads on any machine."""
    sleep = Sleeps()
    proxy = TcpProxy(upstream.url, 0.010, sleep=sleep)
    host, port = (await proxy.start()).removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"GET /0 HTTP/1.1\r\n")
        await writer.drain()
        async with asyncio.timeout(30):
            await sleep.seen.wait()  # the first part was read on its own
        writer.write(b"Host: local\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
        await proxy.close()
    assert proxy.exchanges == 1
    assert sleep.slept == [0.005, 0.005]


def test_a_route_is_a_url_and_a_round_trip_in_milliseconds() -> None:
    assert parse_route("http://127.0.0.1:5000=12") == ("http://127.0.0.1:5000", 0.012)


async def test_a_cut_resets_open_connections_and_a_restore_listens_on_the_same_port(
    upstream: KeepAliveServer,
) -> None:
    sleep = Sleeps()
    proxy = TcpProxy(upstream.url, sleep=sleep)
    endpoint = await proxy.start()
    host, port = endpoint.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        assert await exchange(reader, writer, 0) == b"ok1"
        await proxy.cut()
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await exchange(reader, writer, 1)  # the open connection was reset
        with pytest.raises(ConnectionError):
            await asyncio.open_connection(host, int(port))  # new ones are refused
        await proxy.restore()
        assert proxy.endpoint == endpoint
        reader, writer = await asyncio.open_connection(host, int(port))
        assert await exchange(reader, writer, 2) == b"ok2"
    finally:
        writer.close()
        await proxy.close()
    assert proxy.cuts == 1
    assert sleep.slept == []  # no round trip asked for: no delay
