"""Library code raises only the ``GatekeeperError`` hierarchy.

Every error the library raises for a caller to handle is a ``GatekeeperError`` subclass
that also subclasses the built-in it behaves like (``context_gatekeeper/errors.py``), so
``except GatekeeperError`` catches them all and ``except ValueError`` keeps working.

:func:`bare_builtin_raises` parses a module and lists each ``raise`` of a built-in
exception class, by name, called or not, directly, through ``from``, or through a local
variable bound to one.  The allowed exceptions are spelled out in ``_allowed`` (each with
its reason); a ``raise`` of an expression the parser cannot resolve (``raise exc`` of a
caught exception, ``raise self._failure()``) is not judged here.  Representative sites
raising the hierarchy class (and still the built-in) are tests: tests/test_error_hierarchy.py.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from pathlib import Path

from lint import REPO

LIBRARY = ("shared/context_gatekeeper", "langchain_gatekeeper", "llamaindex_gatekeeper")
"""The library's folders, relative to the repository root."""
EXPECTED = ("shared/context_gatekeeper/errors.py", "langchain_gatekeeper/__init__.py",
            "llamaindex_gatekeeper/__init__.py", "shared/context_gatekeeper/stores/sqlite.py")
"""Modules the scan must find: a moved root would make it pass vacuously."""


def in_test_helpers(path: Path) -> bool:
    """Whether ``path`` is in the shipped test helpers (``context_gatekeeper/testing/``).

    They raise AssertionError for a failed check, as a test would, and the store suite's
    fault hooks raise RuntimeError / TimeoutError to play a crash or a blocked loop inside a
    store; misuse of a helper (a wrong argument) is still an InvalidTypeError /
    InvalidInputError like anywhere else."""
    parts = path.parts
    return any(parts[i : i + 2] == ("context_gatekeeper", "testing") for i in range(len(parts) - 1))


BUILTIN_EXCEPTIONS = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
)


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
        return in_test_helpers(path)
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


def library_modules(root: Path = REPO) -> Iterator[Path]:
    """Every library module, the shipped test helpers included."""
    for folder in LIBRARY:
        yield from sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)


def check(root: Path = REPO) -> list[str]:
    """Each bare built-in raise in the library at ``root`` (``file:line: class: statement``)."""
    modules = list(library_modules(root))
    names = {p.relative_to(root).as_posix() for p in modules}
    missing = sorted(set(EXPECTED) - names)
    if missing:
        return [f"the library is not where lint/errors.py looks: {missing} not found under {list(LIBRARY)}"]
    return [
        f"{path.relative_to(root)}:{line}: {name}: {statement}  (raise a GatekeeperError subclass from "
        "context_gatekeeper/errors.py: InvalidInputError for a ValueError, InvalidTypeError for a TypeError, "
        "StoreClosedError, ...; its message says what went wrong and what to do)"
        for path in modules
        for line, name, statement in bare_builtin_raises(path.read_text(encoding="utf-8"), path)
    ]
