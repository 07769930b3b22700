"""``from context_gatekeeper import PostgresStore`` works, loaded on first use (the postgres
extra is optional: that importing the core alone loads no psycopg is in test_import_purity.py)."""

from __future__ import annotations

import pytest

import context_gatekeeper


def test_postgres_store_is_importable_from_the_top_level() -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from context_gatekeeper import PostgresStore
    from context_gatekeeper.stores.postgres import PostgresStore as Direct

    assert PostgresStore is Direct
    assert issubclass(PostgresStore, context_gatekeeper.Store)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchStore"):
        context_gatekeeper.NoSuchStore  # noqa: B018
    assert "PostgresStore" not in context_gatekeeper.__all__
