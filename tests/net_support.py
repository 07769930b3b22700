"""A guard for tests that a refusal happens before any network connection is tried."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def no_network(monkeypatch: Any) -> Iterator[None]:
    """Fail the test if the code inside tries to open a network connection (a missing key
    must be refused before any is tried, so it can never hang)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a network connection was attempted: {args[1:] or kwargs}")

    with monkeypatch.context() as patched:
        patched.setattr(socket.socket, "connect", refuse)
        patched.setattr(socket.socket, "connect_ex", refuse)
        patched.setattr(socket, "create_connection", refuse)
        yield
