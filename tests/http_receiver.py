"""Real HTTP servers on 127.0.0.1 for the webhook tests: a decision's receiver, or any handler."""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """`handler` served on a free port until the block ends; `server.received` starts empty."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def url_of(server: Any, path: str = "/hooks/decisions") -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


class Receiver:
    """What a webhook receiver got, (path, headers, body) per POST, and how it answers: `status`,
    or `status_for[path]`; `on_request` runs before each answer."""

    def __init__(self, server: ThreadingHTTPServer, status: int) -> None:
        self.server = server
        self.received: list[tuple[str, Any, bytes]] = []
        self.status = status
        self.status_for: dict[str, int] = {}
        self.on_request: Callable[[], None] | None = None
        self.server_address = server.server_address


@contextmanager
def webhook_receiver(status: int = 200) -> Iterator[Receiver]:
    def answer(request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        if receiver.on_request is not None:
            receiver.on_request()
        receiver.received.append((request.path, request.headers, body))
        request.send_response(receiver.status_for.get(request.path, receiver.status))
        request.send_header("Content-Length", "0")
        request.end_headers()

    class Handler(BaseHTTPRequestHandler):
        do_POST = answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as server:
        receiver = Receiver(server, status)
        yield receiver
