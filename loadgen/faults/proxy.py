"""A TCP proxy on loopback whose behaviour switches at run time: the network faults of
``dynbranch bench faults``.

It forwards bytes both ways between each accepted connection and ``target``, so it sits under
gRPC (HTTP/2 over plaintext TCP in the local mesh) without knowing it. Modes:

* ``pass``: forward as they come.
* ``delay``: hold every chunk ``delay_s`` before forwarding it, in each direction, in order.
* ``reset``: reset every open connection (RST, not FIN) at once, and reset each new one as soon as
  it is accepted, until healed: a peer that crashed or a firewall that rejects.
* ``blackhole``: forward nothing and answer nothing, in either direction, and connect new
  connections upstream only once healed; held bytes are delivered on heal, as TCP retransmits
  them once a partition heals: a peer that hangs or a link that drops every packet.

``heal`` returns to ``pass``. Counters say what the proxy did, for reports and tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import socket
import struct
from dataclasses import dataclass, field

log = logging.getLogger(__name__)
CHUNK_BYTES = 64 * 1024


class Mode(enum.Enum):
    """What the proxy does to the traffic."""

    PASS = "pass"
    DELAY = "delay"
    RESET = "reset"
    BLACKHOLE = "blackhole"


@dataclass(slots=True)
class ProxyCounters:
    """Cumulative counts since the proxy started."""

    accepted: int = 0
    #: Connections reset by the proxy (open ones on ``reset`` and new ones refused in it).
    resets: int = 0
    chunks: int = 0
    bytes: int = 0


@dataclass(slots=True, eq=False)  # hashed by identity: kept in a set
class _Link:
    """One proxied connection: the accepted side, the upstream side and their two pumps."""

    down: asyncio.StreamWriter
    up: asyncio.StreamWriter | None = None
    pumps: list[asyncio.Task[None]] = field(default_factory=list)


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with RST: linger 0, then abort (no FIN, unread data dropped)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Forwards ``host:port`` → ``target``; ``start`` binds (port 0 picks one), ``close`` is
    idempotent. ``target`` may be set after start, before the first connection."""

    def __init__(self, target: str = "", host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = target
        self.host, self.port = host, port
        self.mode = Mode.PASS
        self.delay_s = 0.0
        self.counters = ProxyCounters()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        """``host:port`` clients dial."""
        return f"{self.host}:{self.port}"

    async def start(self) -> str:
        """Listen; returns the address."""
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.address

    # -- switching ---------------------------------------------------------------------------

    def delay(self, seconds: float) -> None:
        """Hold each chunk ``seconds`` before forwarding it (both directions)."""
        self._set(Mode.DELAY)
        self.delay_s = seconds

    def reset(self) -> None:
        """Reset every open connection now and every new one until healed."""
        self._set(Mode.RESET)
        for link in list(self._links):
            self._drop(link)

    def blackhole(self) -> None:
        """Stop forwarding (bytes are held, not lost) and hold new connections until healed."""
        self._set(Mode.BLACKHOLE)
        self._flowing.clear()

    def heal(self) -> None:
        """Forward as they come again; held bytes and connections go on."""
        self._set(Mode.PASS)

    def _set(self, mode: Mode) -> None:
        self.mode, self.delay_s = mode, 0.0
        self._flowing.set()

    # -- forwarding --------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counters.accepted += 1
        link = _Link(writer)
        self._links.add(link)
        try:
            await self._flowing.wait()  # a black hole answers nothing, not even the connect
            if self.mode is Mode.RESET:
                self._drop(link)
                return
            up_reader, link.up = await asyncio.open_connection(*self._target())
            link.pumps = [asyncio.create_task(self._pump(reader, link.up)),
                          asyncio.create_task(self._pump(up_reader, writer))]
            await asyncio.gather(*link.pumps, return_exceptions=True)
        except OSError as exc:  # the target is down: the client sees its connection reset
            log.debug("proxy %s: upstream %s: %s", self.address, self.target, exc)
            self._drop(link)
        finally:
            self._links.discard(link)
            for w in (writer, link.up):
                if w is not None and not w.is_closing():
                    w.close()

    def _target(self) -> tuple[str, int]:
        host, _, port = self.target.rpartition(":")
        return host, int(port)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction until EOF; a reset or error on either side ends both."""
        try:
            while data := await reader.read(CHUNK_BYTES):
                if self.mode is Mode.DELAY and self.delay_s > 0:
                    await asyncio.sleep(self.delay_s)
                await self._flowing.wait()
                self.counters.chunks += 1
                self.counters.bytes += len(data)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            _rst(writer)

    def _drop(self, link: _Link) -> None:
        self.counters.resets += 1
        for task in link.pumps:
            task.cancel()
        for w in (link.down, link.up):
            if w is not None:
                _rst(w)

    async def close(self) -> None:
        """Stop listening and reset every connection; idempotent."""
        self._flowing.set()
        if self._server is not None:
            self._server.close()
            for link in list(self._links):
                self._drop(link)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None


__all__ = ["FaultProxy", "Mode", "ProxyCounters"]
