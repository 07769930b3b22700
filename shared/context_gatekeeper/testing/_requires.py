"""pytest and hypothesis for the store conformance suite, or an ImportError saying how to get them.

They are not dependencies of the core: only :mod:`context_gatekeeper.testing.stores` (and
the suite's modules it imports) need them, through the ``testing`` extra.
"""

from __future__ import annotations

try:
    import pytest
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError as missing:  # pragma: no cover - exercised in a subprocess by tests/test_testing_package.py
    from ..errors import MissingExtraError

    raise MissingExtraError(
        f"context_gatekeeper.testing.stores (the store conformance suite) needs pytest and hypothesis, "
        f"which are not installed ({missing}). Install them with: {MissingExtraError.install_command('testing')}",
        extra="testing", name=missing.name,
    ) from missing

__all__ = ["pytest", "HealthCheck", "given", "settings", "st"]
