"""A TCP proxy on loopback in front of a store (the suite's S3 server): what a test breaks
between one process and the store while the others still reach it — an outage (``down``), or a
moment inside one request (``on_request``: the proxy runs a test's step while it holds that
request, then passes it on). The store itself stays real; only this process's path to it is cut
or held."""

from __future__ import annotations

import re
import socket
import threading
from typing import Callable


class StoreProxy:
    """Forwards loopback connections to ``upstream_port``. ``endpoint``: what a config names as
    its store to go through the proxy. A context manager: listening inside the block."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()
        self._down = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._hooks: list[tuple[re.Pattern, Callable[[bytes], None]]] = []
        self.refused = 0  # connections cut or refused while down

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> StoreProxy:
        threading.Thread(target=self._accept, name="store-proxy", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._server.close()
        self._cut()

    def down(self) -> None:
        """The store unreachable through the proxy: open connections are cut, new ones closed at once."""
        self._down.set()
        self._cut()

    def up(self) -> None:
        self._down.clear()

    def on_request(self, pattern: str, step: Callable[[bytes], None]) -> None:
        """Run ``step(request head)`` once, for the first request whose head (``PUT /bucket/key ...``)
        matches ``pattern``, before the request goes on to the store."""
        self._hooks.append((re.compile(pattern.encode()), step))

    def _cut(self) -> None:
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _close(sock)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self._down.is_set():
                self.refused += 1
                _close(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open.update((client, upstream))
            for src, dst, requests in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(src, dst, requests), daemon=True).start()

    def _hook_for(self, chunk: bytes) -> Callable[[bytes], None] | None:
        with self._lock:
            for i, (pattern, step) in enumerate(self._hooks):
                if pattern.match(chunk):
                    del self._hooks[i]
                    return step
        return None

    def _pipe(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        try:
            while chunk := src.recv(65536):
                # A request's head starts a chunk (the SDKs' HTTP clients pipeline no requests).
                step = self._hook_for(chunk) if requests and self._hooks else None
                if step is not None:
                    step(chunk.split(b"\r\n\r\n", 1)[0])
                if self._down.is_set():
                    break
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                _close(sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
