"""``stores.schema``: a stored row that cannot be read is the library's CorruptLogError,
whatever Python error reading it raised (the chain check catches edits made without
recomputing the digests; these are rows whose digests were recomputed, or read unchained)."""

from __future__ import annotations

import json

import pytest

from context_gatekeeper.errors import CorruptLogError
from context_gatekeeper.stores.schema import revision_from_fields


def _fields(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = dict(
        number=1, parent=0, kind="append", instruction=None, model=None, created_at=1.0, base=None, target=None,
        changes=json.dumps([]),
    )
    fields.update(overrides)
    return fields


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"changes": "[" * 100_000 + "]" * 100_000}, id="JSON nested past the recursion limit"),
        pytest.param(
            {"changes": '[{"op":"put","message":{"id":"m1","role":"user","content":"hi","revision":1e400},'
                        '"after":null,"end":true}]'},
            id="a message's revision too large for an integer",
        ),
        pytest.param({"changes": json.dumps([{"op": "put", "message": 5}])}, id="a message that is not an object"),
        pytest.param({"changes": "{not json"}, id="not JSON"),
    ],
)
def test_an_unreadable_row_is_a_corrupt_log_error_naming_session_and_revision(overrides: dict[str, object]) -> None:
    with pytest.raises(CorruptLogError, match="unreadable row") as caught:
        revision_from_fields("s", **_fields(**overrides))  # type: ignore[arg-type]
    assert (caught.value.session_id, caught.value.revision) == ("s", 1)


def test_a_readable_row_reads() -> None:
    revision = revision_from_fields("s", **_fields())  # type: ignore[arg-type]
    assert (revision.number, revision.kind, revision.changes) == (1, "append", ())


def test_schema_behind_names_what_is_missing_and_leaves_other_failures_alone() -> None:
    from context_gatekeeper.errors import SchemaVersionError
    from context_gatekeeper.stores.schema import Migration, schema_behind

    migrations = [Migration(n, f"m{n}", ()) for n in (1, 2, 3)]
    assert schema_behind({1, 2, 3}, migrations, "db", "call setup()") is None  # up to date: another failure
    for nothing in (None, set()):
        error = schema_behind(nothing, migrations, "db", "call setup()", "the path")
        assert isinstance(error, SchemaVersionError)
        assert str(error).startswith("db holds no context-gatekeeper tables") and str(error).endswith("check the path")
    error = schema_behind({1}, migrations, "db", "call setup()")
    assert isinstance(error, SchemaVersionError) and "schema version 1 (migration(s) [2, 3] not applied yet)" in str(error)
    assert "Call setup() to bring the schema up to date" in str(error)
