"""The HTTP server of ``modelplan metrics --port``: ``GET /metrics`` answered by a fixed set of threads.

prometheus_client's own server starts a thread for each connection and waits on it without a timeout, so
connections left open doing nothing add threads without bound. Here one thread accepts connections and
reads their requests without blocking; only a whole request goes to one of a fixed number of handler
threads, which read the registry and answer. A client that sends nothing, or sends it a byte at a time,
holds no handler: it is closed when its request has not arrived in time, or when too many such
connections are open (the oldest first). The bounds are in ``producer.constants``.
"""

from __future__ import annotations

import queue
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from producer.constants import (
    METRICS_HANDLER_THREADS,
    METRICS_HEAD_BYTES,
    METRICS_HEAD_DEADLINE_S,
    METRICS_MAX_PENDING,
    METRICS_POLL_S,
    METRICS_QUEUED,
    METRICS_SEND_TIMEOUT_S,
)
from worker.logs import get_logger

log = get_logger("modelplan.metrics")

PATHS = ("/metrics", "/")
"""Where the metrics are served; anything else is 404."""

LISTEN_BACKLOG = 64
"""Connections the kernel keeps for the accepting thread: it accepts them all each time it wakes."""

READ_BYTES = 4096


@dataclass
class _Pending:
    """A connection whose request has not all arrived, and when it must have."""

    deadline: float
    head: bytearray = field(default_factory=bytearray)


def _head_end(head: bytes | bytearray) -> int:
    """Where the request's blank line ends, or -1 before it has come (bare ``\\n`` line ends, which some
    hand-typed requests use, count too)."""
    ends = [i + len(sep) for sep in (b"\r\n\r\n", b"\n\n") if (i := head.find(sep)) >= 0]
    return min(ends, default=-1)


def _response(
    status: str, body: bytes, content_type: str = "text/plain; charset=utf-8", *, head_only: bool = False
) -> bytes:
    lines = [
        f"HTTP/1.1 {status}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if head_only else body)


class MetricsServer:
    """Serves ``registry`` on ``addr:port`` (port 0: one the system picks; ``address`` says which) once
    started, until closed."""

    def __init__(
        self,
        registry: CollectorRegistry,
        addr: str,
        port: int,
        *,
        handlers: int = METRICS_HANDLER_THREADS,
        max_pending: int = METRICS_MAX_PENDING,
        queued: int = METRICS_QUEUED,
        head_deadline: float = METRICS_HEAD_DEADLINE_S,
        send_timeout: float = METRICS_SEND_TIMEOUT_S,
    ) -> None:
        self.registry = registry
        self.max_pending = max_pending
        self.head_deadline = head_deadline
        self.send_timeout = send_timeout
        family, kind, proto, _, where = socket.getaddrinfo(
            addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        self._listener = socket.socket(family, kind, proto)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(where)
            self._listener.listen(LISTEN_BACKLOG)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._wake, self._waker = socket.socketpair()
        """A byte written to ``_waker`` wakes the accepting thread at once when the server closes."""
        self._selector.register(self._wake, selectors.EVENT_READ)
        self._pending: dict[socket.socket, _Pending] = {}
        """Connections still sending their request, oldest first; touched by the accepting thread only."""
        self._requests: queue.Queue[tuple[socket.socket, bytes] | None] = queue.Queue(maxsize=queued)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept_loop, name="metrics-accept", daemon=True)] + [
            threading.Thread(target=self._answer_loop, name=f"metrics-handler-{i}", daemon=True)
            for i in range(handlers)
        ]

    def start(self) -> MetricsServer:
        for t in self._threads:
            t.start()
        return self

    def close(self) -> None:
        """Stop accepting, let the handlers finish what they hold, close every connection."""
        self._stop.set()
        self._waker.send(b"\0")
        accepting, *handlers = self._threads
        if accepting.is_alive():
            accepting.join()
        for t in handlers:
            if t.is_alive():
                self._requests.put(None)
        for t in handlers:
            if t.is_alive():
                t.join()
        for conn in list(self._pending):
            self._drop(conn)
        while not self._requests.empty():
            item = self._requests.get_nowait()
            if item is not None:
                item[0].close()
        self._selector.close()
        for sock in (self._listener, self._wake, self._waker):
            sock.close()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # --- the accepting thread ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=METRICS_POLL_S):
                conn = key.fileobj
                assert isinstance(conn, socket.socket)
                if conn is self._wake:
                    continue  # the loop's test sees the server stopped
                if conn is self._listener:
                    self._accept()
                elif conn in self._pending:  # not closed by an accept earlier in this round
                    self._read(conn)
            now = time.monotonic()
            for conn in [c for c, p in self._pending.items() if p.deadline <= now]:
                self._drop(conn)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the client gave up before it was accepted, or no descriptor is left
                return
            if len(self._pending) >= self.max_pending:
                self._drop(next(iter(self._pending)))
            conn.setblocking(False)
            self._pending[conn] = _Pending(time.monotonic() + self.head_deadline)
            self._selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        pending = self._pending[conn]
        pending.head += data
        end = _head_end(pending.head)
        if not data or (end < 0 and len(pending.head) > METRICS_HEAD_BYTES):
            self._drop(conn)
            return
        if end < 0:
            return
        self._selector.unregister(conn)
        del self._pending[conn]
        try:
            self._requests.put_nowait((conn, bytes(pending.head[:end])))
        except queue.Full:
            conn.close()

    def _drop(self, conn: socket.socket) -> None:
        self._selector.unregister(conn)
        del self._pending[conn]
        conn.close()

    # --- the handler threads ----------------------------------------------------------------------------

    def _answer_loop(self) -> None:
        while (item := self._requests.get()) is not None:
            conn, head = item
            try:
                answer = self._answer(head)
                conn.settimeout(self.send_timeout)  # since Python 3.5, for the whole of sendall
                conn.sendall(answer)
            except OSError:
                pass  # the client went away or does not read: nothing to tell it
            except Exception:
                # a bug here must not cost the server one of its few handlers
                log.exception("metrics_answer_failed")
            finally:
                conn.close()

    def _answer(self, head: bytes) -> bytes:
        request_line, *header_lines = head.decode("latin-1").splitlines()
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response("400 Bad Request", b"not an HTTP request\n")
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return _response("405 Method Not Allowed", b"only GET and HEAD\n")
        if target.partition("?")[0] not in PATHS:
            return _response("404 Not Found", b"metrics are at /metrics\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        try:
            body = encoder(self.registry)
        except Exception:
            # a collector's bug: this scrape fails, the next is tried afresh
            log.exception("metrics_scrape_failed")
            return _response("500 Internal Server Error", b"the metrics could not be read\n")
        return _response("200 OK", body, content_type, head_only=method == "HEAD")
