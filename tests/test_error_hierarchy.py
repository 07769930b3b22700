"""Library code raises only the GatekeeperError hierarchy (issue #14).

Every error the library raises for a caller to handle is a ``GatekeeperError``
subclass that also subclasses the built-in it behaves like (see
``context_gatekeeper/errors.py``), so ``except GatekeeperError`` catches them all and
``except ValueError`` / ``pytest.raises(TypeError)`` keep working.

``test_no_library_module_raises_a_bare_builtin`` parses every library module and
lists each ``raise`` of a built-in exception class, by name, called or not, directly,
through ``from``, or through a local variable bound to one.  The allowed exceptions
are spelled out in ``_allowed`` (each with its reason); a ``raise`` of an expression
the parser cannot resolve (``raise exc`` of a caught exception, ``raise
self._failure()``) is not judged here.  The other tests check that representative
sites raise the hierarchy class and still the built-in.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from pathlib import Path
from typing import Any, Callable, Iterator

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

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = (ROOT / "shared" / "context_gatekeeper", ROOT / "langchain_gatekeeper", ROOT / "llamaindex_gatekeeper")
TEST_HELPERS = ROOT / "shared" / "context_gatekeeper" / "testing"
"""Shipped test helpers: they raise AssertionError for a failed check, as a test would,
and the store suite's fault hooks raise RuntimeError / TimeoutError to play a crash or
a blocked loop inside a store; misuse of a helper (a wrong argument) is still an
InvalidTypeError / InvalidInputError like anywhere else."""

BUILTIN_EXCEPTIONS = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
)


# -- the scanner ------------------------------------------------------------------------
def _builtin_classes(expr: ast.expr | None, bound: dict[str, set[str]]) -> set[str]:
    """The built-in exception classes ``expr`` evaluates to (an instance or the class):
    ``ValueError``, ``ValueError(...)``, ``builtins.ValueError``, ``A if c else B``, or a
    local name bound to one of those; empty when it is none of them or cannot be told."""
    if isinstance(expr, ast.Call):
        return _builtin_classes(expr.func, bound)
    if isinstance(expr, ast.Name):
        if expr.id in bound:
            return bound[expr.id]
        return {expr.id} if expr.id in BUILTIN_EXCEPTIONS else set()
    if isinstance(expr, ast.Attribute):  # builtins.ValueError, asyncio.TimeoutError (an alias)
        return {expr.attr} if expr.attr in BUILTIN_EXCEPTIONS else set()
    if isinstance(expr, ast.IfExp):
        return _builtin_classes(expr.body, bound) | _builtin_classes(expr.orelse, bound)
    return set()


def _message_text(call: ast.expr) -> str:
    """The literal text of a raise's first argument (f-string parts joined), else ''."""
    if not (isinstance(call, ast.Call) and call.args):
        return ""
    arg = call.args[0]
    parts = arg.values if isinstance(arg, ast.JoinedStr) else [arg]
    return "".join(p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str))


def _allowed(name: str, raise_node: ast.Raise, scope: list[ast.AST], path: Path) -> bool:
    """Whether raising the built-in ``name`` here is one of the documented exceptions."""
    function = next((s for s in reversed(scope) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    owner = scope[scope.index(function) - 1] if function is not None and scope.index(function) > 0 else None
    if name == "NotImplementedError":  # a base class's method a subclass must (or may) override
        return function is not None and isinstance(owner, ast.ClassDef)
    if name == "AttributeError":  # the __getattr__ protocol (PEP 562 for a module) requires it
        return function is not None and function.name == "__getattr__"
    if name in {"AssertionError", "RuntimeError", "TimeoutError"}:  # a failed check, a scripted fault
        return TEST_HELPERS in path.parents
    if name == "SystemExit":  # a command-line entry point ending the program with its status
        return True
    if name == "EOFError":  # the chat's line readers stand in for input(), which ends with EOFError
        return path.parent.name == "chat"
    if name == "ImportError":  # an optional dependency is missing: the message says what to install
        return raise_node.exc is not None and "pip install" in _message_text(raise_node.exc)
    return False


def bare_builtin_raises(source: str, path: Path) -> list[tuple[int, str, str]]:
    """``(line, class name, statement)`` for each raise of a built-in exception class in
    ``source`` that ``_allowed`` does not excuse."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, scope: list[ast.AST], bound: dict[str, set[str]]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            bound = {}  # a new local namespace
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Assign):
                classes = _builtin_classes(child.value, bound)
                for target in child.targets:
                    if isinstance(target, ast.Name):
                        if classes:
                            bound[target.id] = classes
                        else:
                            bound.pop(target.id, None)
            if isinstance(child, ast.Raise) and child.exc is not None:
                for name in sorted(_builtin_classes(child.exc, bound)):
                    if not _allowed(name, child, scope, path):
                        found.append((child.lineno, name, ast.unparse(child).splitlines()[0][:100]))
            nested = scope + [child] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else scope
            visit(child, nested, bound)

    visit(ast.parse(source), [], {})
    return found


def library_modules() -> Iterator[Path]:
    """Every library module, the shipped test helpers included."""
    for root in LIBRARY:
        yield from sorted(root.rglob("*.py"))


# -- the rule, over the whole library ------------------------------------------------------
def test_the_library_is_where_the_scan_looks() -> None:
    modules = list(library_modules())
    names = {p.relative_to(ROOT).as_posix() for p in modules}
    # A moved root would make the scan pass vacuously.
    assert {"shared/context_gatekeeper/errors.py", "langchain_gatekeeper/__init__.py",
            "llamaindex_gatekeeper/__init__.py", "shared/context_gatekeeper/stores/sqlite.py"} <= names
    assert len(modules) > 60


def test_no_library_module_raises_a_bare_builtin() -> None:
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {name}: {statement}"
        for path in library_modules()
        for line, name, statement in bare_builtin_raises(path.read_text(encoding="utf-8"), path)
    ]
    assert not problems, (
        "library code must raise a GatekeeperError subclass (context_gatekeeper/errors.py: "
        "InvalidInputError for a ValueError, InvalidTypeError for a TypeError, StoreClosedError, ...), "
        "with a message saying what went wrong and what to do:\n" + "\n".join(problems)
    )


# -- the scanner finds what it must, and only that ----------------------------------------
SAMPLE = Path("shared/context_gatekeeper/selection/sample.py")


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("raise ValueError('x')", "ValueError"),
        ("raise TypeError", "TypeError"),
        ("def f(e):\n    raise RuntimeError('x') from e", "RuntimeError"),
        ("def f():\n    error = KeyError('k')\n    raise error", "KeyError"),
        ("def f(c):\n    kind = IndexError if c else LookupError\n    raise kind('x')", "IndexError"),
        ("import builtins\nraise builtins.LookupError()", "LookupError"),
        ("raise AssertionError('outside testing/')", "AssertionError"),
        ("def f():\n    raise NotImplementedError", "NotImplementedError"),  # not in a class
        ("def get(n):\n    raise AttributeError(n)", "AttributeError"),  # not __getattr__
        ("raise ImportError('numpy is missing')", "ImportError"),  # no install hint
        ("raise TimeoutError('slow')", "TimeoutError"),
    ],
)
def test_the_scanner_reports_bare_builtins(source: str, name: str) -> None:
    found = bare_builtin_raises(source, SAMPLE)
    assert [n for _, n, _ in found][:1] == [name]


@pytest.mark.parametrize(
    "source",
    [
        "from context_gatekeeper.errors import InvalidInputError\nraise InvalidInputError('x')",
        "def f():\n    try:\n        pass\n    except ValueError:\n        raise",
        "def f(exc):\n    raise exc",
        "def f():\n    error = KeyError('k')\n    error = StaleHeadError('s')\n    raise error",
        "class Base:\n    def run(self):\n        raise NotImplementedError('override run')",
        "def __getattr__(name):\n    raise AttributeError(name)",
        "class Lazy:\n    def __getattr__(self, name):\n        raise AttributeError(name)",
        "raise SystemExit(main())",
        "raise ImportError(\"an embedder needs numpy: pip install 'context-gatekeeper[semantic]'\")",
    ],
)
def test_the_scanner_lets_the_allowed_raises_through(source: str) -> None:
    assert bare_builtin_raises(source, SAMPLE) == []


def test_eof_error_is_allowed_only_in_the_chat_readers() -> None:
    source = "def read():\n    raise EOFError"
    assert bare_builtin_raises(source, Path("shared/context_gatekeeper/chat/readers.py")) == []
    assert [n for _, n, _ in bare_builtin_raises(source, SAMPLE)] == ["EOFError"]


def test_the_scanner_reports_file_and_line() -> None:
    source = textwrap.dedent(
        """\
        x = 1

        def f():
            raise ValueError("bad")
        """
    )
    assert bare_builtin_raises(source, SAMPLE) == [(4, "ValueError", "raise ValueError('bad')")]


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
