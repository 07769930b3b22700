"""Library errors are the GatekeeperError hierarchy, and still the built-in they behave like.

Every error the library raises for a caller to handle is a ``GatekeeperError`` subclass
that also subclasses the built-in it behaves like (see ``context_gatekeeper/errors.py``),
so ``except GatekeeperError`` catches them all and ``except ValueError`` /
``pytest.raises(TypeError)`` keep working.  Here representative sites raise the hierarchy
class with a message that says what to do.  That no library module raises a bare built-in
is a code scan: ``lint/errors.py`` (``python -m lint``), tested in ``tests/test_lint.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from context_gatekeeper import (
    ContextGatekeeper,
    EditOptions,
    GatekeeperError,
    InvalidInputError,
    InvalidTypeError,
    Message,
    SelectionParams,
    StoreClosedError,
    Transcript,
    resolve_token_counter,
)
from context_gatekeeper.editing.gemini import GeminiModel
from context_gatekeeper.editing.models import as_edit_model
from context_gatekeeper.stores.sqlite import SQLiteStore


# -- representative sites raise the hierarchy class, and still the built-in ---------------
class SomeCounter:
    def __call__(self, text: str) -> int:
        return len(text)


def _closed_store_read(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "closed.db")
    store.close()
    store.head("s")


SITES: list[tuple[str, Callable[[Path], Any], type[GatekeeperError], type[Exception], str]] = [
    ("SelectionParams(idf=...)", lambda _: SelectionParams(idf="x"), InvalidInputError, ValueError, "unknown idf"),
    ("SelectionParams(top_m=0)", lambda _: SelectionParams(top_m=0), InvalidInputError, ValueError, "must be >= 1"),
    ("SelectionParams.preset", lambda _: SelectionParams.preset("nope"), InvalidInputError, ValueError, "preset"),
    ("Message(id='')", lambda _: Message(id="", role="user", content="hi"), InvalidInputError, ValueError, "id"),
    ("Message(role=...)", lambda _: Message("m1", "robot", "hi"), InvalidInputError, ValueError, "role"),  # type: ignore[arg-type]
    ("Message(metadata=...)", lambda _: Message("m1", "user", "hi", metadata=[]), InvalidTypeError, TypeError,  # type: ignore[arg-type]
     "metadata"),
    ("GeminiModel(timeout=0)", lambda _: GeminiModel(timeout=0), InvalidInputError, ValueError, "timeout > 0"),
    ("SQLiteStore closed", _closed_store_read, StoreClosedError, RuntimeError, "closed"),
    ("resolve_token_counter(class)", lambda _: resolve_token_counter(SomeCounter), InvalidTypeError, TypeError,
     "not the class SomeCounter"),
    ("resolve_token_counter(name)", lambda _: resolve_token_counter("no-such-encoding"), InvalidInputError,
     ValueError, "unknown token encoding"),
    ("ContextGatekeeper(bogus=)", lambda _: ContextGatekeeper(token_budget=100, bogus=1), InvalidTypeError,
     TypeError, "bogus"),
    ("ContextGatekeeper(on_overflow=)", lambda _: ContextGatekeeper(token_budget=100, on_overflow="drop"),
     InvalidInputError, ValueError, "on_overflow"),
    ("as_edit_model(None)", lambda _: as_edit_model(None), InvalidTypeError, TypeError, "needs a model"),
    ("EditOptions.with_(typo)", lambda _: EditOptions().with_(stratgy="rewrite"), InvalidTypeError, TypeError,
     "no field 'stratgy'"),
    ("Transcript(store=42)", lambda _: Transcript(store=42), InvalidTypeError, TypeError, "store must be"),
    ("SQLiteStore session id", lambda p: SQLiteStore(p / "s.db").head(42), InvalidTypeError, TypeError,  # type: ignore[arg-type]
     "session_id"),
]


@pytest.mark.parametrize(("site", "call", "error", "builtin", "says"), SITES, ids=[s[0] for s in SITES])
def test_representative_sites_raise_the_hierarchy(
    tmp_path: Path, site: str, call: Callable[[Path], Any], error: type[GatekeeperError],
    builtin: type[Exception], says: str,
) -> None:
    with pytest.raises(error, match=says) as info:
        call(tmp_path)
    assert isinstance(info.value, GatekeeperError) and isinstance(info.value, builtin), site


def test_a_closed_sqlite_store_keeps_its_connection_closed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    store.close()
    with pytest.raises(StoreClosedError, match="open a new SQLiteStore"):
        store.sessions()


def test_langchain_adapter_refuses_a_non_chat_model_with_the_hierarchy() -> None:
    models = pytest.importorskip("langchain_gatekeeper.models")
    with pytest.raises(InvalidTypeError, match="BaseChatModel") as info:
        models.LangChainEditModel("not a model")
    assert isinstance(info.value, TypeError)


def test_llamaindex_adapter_refuses_a_non_llm_with_the_hierarchy() -> None:
    models = pytest.importorskip("llamaindex_gatekeeper.models")
    with pytest.raises(InvalidTypeError, match="LlamaIndex LLM") as info:
        models.LlamaIndexEditModel("not an llm")
    assert isinstance(info.value, TypeError)
