"""The one TCP proxy of the tests and the benchmark: on 127.0.0.1 in front of a local
server, it adds a fixed network round trip to every HTTP request/response exchange it
carries (``round_trip``), and it can be cut and restored like an endpoint that goes down.

**Latency.**
The local servers answer in microseconds of network and milliseconds of their own CPU; AWS
answers over a network whose round trips are what a sequential consumer waits on. This
proxy puts that round trip back: half of it before a request is passed on, half before its
response is passed back, so a payload sent through it also arrives on the queue half a
round trip after the send began, as it would in a region.

Per exchange, not per connection: botocore keeps connections alive (dynalite answers
HTTP/1.1 keep-alive; moto closes each one), so one connection carries many requests, and
each of them is delayed. The proxy needs no HTTP parser for that: clients of these
servers never pipeline, so a request begins with the first bytes the client sends after
the server has answered (or after the connection opened), and its response begins with
the first bytes the server sends after that. A request's further bytes (a large body in
several reads) and a response's are passed on at once, in order, behind the delayed
first ones.

**Outage.** :meth:`TcpProxy.cut` aborts every open connection and stops listening, so new
ones are refused, as an endpoint that went down would; :meth:`TcpProxy.restore` listens on
the same port again.

Run as its own process (the benchmark does, so its CPU is measured apart)::

    python -m localaws.proxy --route http://127.0.0.1:5000=12 --route http://127.0.0.1:8000=5

prints one JSON line ``{"endpoints": {"<target>": "<proxy url>", ...}}`` once it listens,
and serves until SIGTERM. uvloop is used when it is installed (less CPU per exchange).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

HOST = "127.0.0.1"
#: Read size of both directions.
CHUNK = 65536


@dataclass
class _Exchange:
    """Where one connection is: has the server answered since the client last sent a
    request (so the client's next bytes begin a new one), is a response awaited."""

    answered: bool = True
    awaiting: bool = False

    def begin_request(self) -> bool:
        """Whether the client's next bytes begin a new request (the last was answered)."""
        if not self.answered:
            return False
        self.answered, self.awaiting = False, True
        return True

    def begin_response(self) -> bool:
        """Whether the server's next bytes begin the answer to the request sent."""
        if not self.awaiting:
            return False
        self.awaiting, self.answered = False, True
        return True


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; each exchange takes ``round_trip``
    seconds more (none by default). ``sleep`` is injectable: a test records the delays
    instead of waiting."""

    def __init__(
        self,
        target: str,
        round_trip: float = 0.0,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        parts = urlsplit(target)
        self.target = target
        self._target_host = parts.hostname or HOST
        self._target_port = parts.port or 80
        self._half = round_trip / 2
        self._sleep = sleep
        self._server: asyncio.Server | None = None
        self._port = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0
        self.exchanges = 0
        self.cuts = 0

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self._port}"

    async def start(self) -> str:
        """Listen (on the port of a previous start, if any: a restore keeps the endpoint)."""
        self._server = await asyncio.start_server(self._serve, HOST, self._port, reuse_address=True)
        self._port = self._server.sockets[0].getsockname()[1]
        return self.endpoint

    async def cut(self) -> None:
        """The endpoint goes down: open connections are reset, new ones refused."""
        self.cuts += 1
        await self.close()

    async def restore(self) -> None:
        """The endpoint comes back, on the same port."""
        await self.start()

    async def close(self) -> None:
        """Stop listening and abort every connection carried."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self._target_host, self._target_port
            )
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        exchange = _Exchange()
        self._writers.update((writer, up_writer))

        def request_begins() -> bool:
            began = exchange.begin_request()
            self.exchanges += began
            return began

        try:
            await asyncio.gather(
                self._carry(reader, up_writer, request_begins),
                self._carry(up_reader, writer, exchange.begin_response),
            )
        finally:
            for end in (writer, up_writer):
                self._writers.discard(end)
                end.transport.abort()

    async def _carry(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        begins: Callable[[], bool],
    ) -> None:
        """Pass one direction's bytes on, half a round trip late wherever ``begins`` says a
        request (or its response) starts, until the sender closes or a cut resets it."""
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(CHUNK):
                if begins() and self._half:
                    await self._sleep(self._half)
                writer.write(chunk)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.write_eof()


def parse_route(text: str) -> tuple[str, float]:
    """``http://host:port=12`` → (target, round trip in seconds)."""
    target, _, milliseconds = text.rpartition("=")
    if not target or not milliseconds:
        raise argparse.ArgumentTypeError(f"expected URL=MILLISECONDS, got {text!r}")
    return target, float(milliseconds) / 1000


async def serve(routes: Sequence[tuple[str, float]]) -> None:
    proxies = [TcpProxy(target, round_trip) for target, round_trip in routes]
    endpoints = {proxy.target: await proxy.start() for proxy in proxies}
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    print(json.dumps({"endpoints": endpoints}), flush=True)
    await stopping.wait()
    for proxy in proxies:
        await proxy.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--route", type=parse_route, action="append", required=True,
                        help="TARGET_URL=ROUND_TRIP_MS, once per endpoint")  # fmt: skip
    args = parser.parse_args(argv)
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(serve(args.route))
    return 0


if __name__ == "__main__":
    sys.exit(main())
