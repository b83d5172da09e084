"""A real SMTP server on 127.0.0.1 for the notification tests (aiosmtpd), keeping what it receives."""

import email
import email.policy
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.peers: set[Any] = set()  # the clients' (address, port): one per connection

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.peers.add(session.peer)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append(message)  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@contextmanager
def smtp_server(port: int | None = None) -> Iterator[tuple[Mailbox, int]]:
    """An SMTP server on `port` (a free one by default) until the block ends: its mailbox and port."""
    mailbox = Mailbox()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port or free_port())
    controller.start()
    try:
        yield mailbox, controller.port
    finally:
        controller.stop()
