"""``python -m context_gatekeeper.chat``: the same as the ``gatekeeper-chat`` command."""

from __future__ import annotations

from .app import main

if __name__ == "__main__":
    raise SystemExit(main())
