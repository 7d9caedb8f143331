"""uvicorn's HTTP protocol with deadlines for slow clients, as ``scjepa serve`` runs it.

uvicorn times out only idle keep-alive connections (5 s): a client that opens a
connection and sends nothing, or sends half its headers, or half its body, holds it
open forever, and enough of them exhaust the process (measured: 800 half-sent requests
held 40 s, none closed). This protocol gives each request ``SCJEPA_READ_TIMEOUT_S`` for
its headers (from the connection's start or the request's first byte) and again for its
body, then answers 408 and closes; headers over 64 KiB get 431 (the request line
included, however many reads they came in); bytes that do not parse as HTTP get a JSON
400, not uvicorn's plain text. A proxy in front
(nginx: ``client_header_timeout``, ``client_body_timeout``) can do the same earlier.
"""

from __future__ import annotations

import asyncio
import json
from functools import cache
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service import metrics

MAX_HEADER_BYTES = 64 * 1024


@cache
def read_timeout_s() -> float:
    """From the settings of the process that serves (uvicorn workers re-import)."""
    from service.config import Settings

    return Settings().read_timeout_s


def _raw(status: int, reason: str, what: str) -> bytes:
    body = json.dumps({"detail": what}, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class _HeadTooLarge(Exception):
    """Raised in a parser callback to stop parsing a request refused 431."""


# "GET " + " HTTP/1.1\r\n": the request line around its target
REQUEST_LINE_BYTES = 15


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol plus a read deadline per request phase and a header cap."""

    read_timer: asyncio.TimerHandle | None = None
    head_bytes = 0
    in_head = True
    heads = 0  # requests whose headers ended on this connection
    # the request's target and headers as parsed, whatever reads they came in: a head
    # that arrives whole in one read is not counted by data_received (it cannot tell
    # the head's bytes from the body's there)
    parsed_head = 0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.in_head, self.head_bytes = True, 0
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self.read_timer = self.loop.call_later(read_timeout_s(), self._timed_out)

    def _disarm(self) -> None:
        if self.read_timer is not None:
            self.read_timer.cancel()
            self.read_timer = None

    def _refuse(self, status: int, reason: str, what: str) -> None:
        self._disarm()
        if self.transport.is_closing():
            return
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(_raw(status, reason, what))
        self.transport.close()

    def _timed_out(self) -> None:
        self.read_timer = None
        metrics.REFUSED.labels(reason="read_timeout", tenant="").inc()
        phase = "headers" if self.in_head else "body"
        self._refuse(
            408,
            "Request Timeout",
            f"request {phase} not received within {read_timeout_s():g} s "
            "(SCJEPA_READ_TIMEOUT_S)",
        )

    def data_received(self, data: bytes) -> None:
        counting, heads = self.in_head, self.heads
        super().data_received(data)
        # still no end of headers after these bytes (not: a whole request, headers and
        # body, came in this read and left the parser at the next one's start)
        if counting and self.in_head and self.heads == heads:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEADER_BYTES:
                self._refuse(
                    431,
                    "Request Header Fields Too Large",
                    f"request headers over {MAX_HEADER_BYTES} bytes",
                )

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes that are not HTTP, as JSON like every error."""
        if self.transport.is_closing():  # refused already (431): parsing stopped there
            return
        self._refuse(
            400,
            "Bad Request",
            "invalid HTTP request: the request line, a header or the chunked body "
            "framing does not parse",
        )

    def _count_head(self, n: int) -> None:
        self.parsed_head += n
        if self.parsed_head > MAX_HEADER_BYTES:
            self._refuse(
                431,
                "Request Header Fields Too Large",
                f"request headers over {MAX_HEADER_BYTES} bytes",
            )
            raise _HeadTooLarge  # the parser stops: uvicorn answers nothing more

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.parsed_head = REQUEST_LINE_BYTES
        if self.read_timer is None:  # a new request on a kept-alive connection
            self._arm()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.heads += 1
        super().on_headers_complete()
        self._arm()  # the body's deadline

    def on_message_complete(self) -> None:
        self._disarm()
        self.in_head, self.head_bytes = True, 0
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
