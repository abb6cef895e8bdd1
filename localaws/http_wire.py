"""HTTP/1.1 messages read and written on asyncio streams: what the local proxies need to pass
a request on to a local AWS endpoint, or to answer it themselves. Just enough of the protocol
for botocore and the moto server (Content-Length and chunked bodies, HEAD, 100-continue is
the caller's)."""

from __future__ import annotations

import asyncio


async def read_head(reader: asyncio.StreamReader) -> tuple[str, dict[str, str]] | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise
    lines = raw.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes | None:
    """The body by Content-Length or chunks; None when neither says (read to the end)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return None


async def read_response(
    reader: asyncio.StreamReader, *, head: bool
) -> tuple[int, dict[str, str], bytes]:
    found = await read_head(reader)
    if found is None:
        raise ConnectionError("the server closed without answering")
    line, headers = found
    status = int(line.split(" ", 2)[1])
    if head or status in (204, 304):
        body = b""
    else:
        read = await read_body(reader, headers)
        body = read if read is not None else await reader.read()
    headers.pop("transfer-encoding", None)
    headers.pop("connection", None)
    if not head:
        headers["content-length"] = str(len(body))
    return status, headers, body


def write_response(
    writer: asyncio.StreamWriter,
    status: int,
    headers: dict[str, str],
    body: bytes,
    *,
    head: bool = False,
) -> None:
    lines = [f"HTTP/1.1 {status} {'OK' if status < 400 else 'Error'}"]
    names = {name.lower() for name in headers}
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if "content-length" not in names and not head:
        lines.append(f"Content-Length: {len(body)}")
    lines += ["", ""]
    writer.write("\r\n".join(lines).encode("latin-1") + (b"" if head else body))
