"""``from context_gatekeeper import PostgresStore`` works, and importing the core alone
never imports psycopg (the postgres extra is optional)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import context_gatekeeper


def test_postgres_store_is_importable_from_the_top_level() -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from context_gatekeeper import PostgresStore
    from context_gatekeeper.stores.postgres import PostgresStore as Direct

    assert PostgresStore is Direct
    assert issubclass(PostgresStore, context_gatekeeper.Store)


def test_importing_the_core_does_not_import_psycopg() -> None:
    code = "import sys, context_gatekeeper; print('psycopg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchStore"):
        context_gatekeeper.NoSuchStore  # noqa: B018
    assert "PostgresStore" not in context_gatekeeper.__all__
