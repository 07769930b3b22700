"""Importing an adapter without its framework names the extra to install.

Each case runs in a fresh interpreter where the framework is hidden, as if it were not
installed: a ``sys.meta_path`` finder that raises ``ModuleNotFoundError`` for it (what the
import system raises for a missing package), or ``sys.modules[name] = None``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from context_gatekeeper.errors import MissingExtraError

HIDE = textwrap.dedent(
    """
    import json, sys

    HIDDEN = {hidden!r}

    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name in HIDDEN or name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    for name in {none!r}:
        sys.modules[name] = None
    try:
        {statement}
    except BaseException as error:
        from context_gatekeeper.errors import GatekeeperError
        cause = error.__cause__
        print(json.dumps({{
            "type": type(error).__name__,
            "gatekeeper": isinstance(error, GatekeeperError),
            "module_not_found": isinstance(error, ModuleNotFoundError),
            "message": str(error),
            "name": getattr(error, "name", None),
            "extra": getattr(error, "extra", None),
            "cause": type(cause).__name__ if cause else None,
            "cause_name": getattr(cause, "name", None),
        }}))
    else:
        print(json.dumps({{"type": None}}))
    """
)


def import_hiding(statement: str, hidden: tuple[str, ...] = (), none: tuple[str, ...] = ()) -> dict[str, object]:
    """What ``statement`` raises in a fresh interpreter with ``hidden`` not installed."""
    code = HIDE.format(hidden=hidden, none=none, statement=statement)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


LANGCHAIN_HINT = MissingExtraError.install_command("langchain")  # the child is the same installation
LLAMAINDEX_HINT = MissingExtraError.install_command("llamaindex")


@pytest.mark.parametrize(
    ("statement", "hidden", "none", "extra", "hint", "missing"),
    [
        ("import langchain_gatekeeper", ("langchain_core",), (), "langchain", LANGCHAIN_HINT, "langchain_core"),
        ("import langchain_gatekeeper", ("langgraph",), (), "langchain", LANGCHAIN_HINT, "langgraph"),
        ("import langchain_gatekeeper", (), ("langchain_core",), "langchain", LANGCHAIN_HINT, None),
        (
            "from langchain_gatekeeper.history import GatekeeperChatMessageHistory",
            ("langchain_core", "langchain", "langgraph"),
            (),
            "langchain",
            LANGCHAIN_HINT,
            None,
        ),
        ("import llamaindex_gatekeeper", ("llama_index",), (), "llamaindex", LLAMAINDEX_HINT, "llama_index"),
        ("import llamaindex_gatekeeper", (), ("llama_index",), "llamaindex", LLAMAINDEX_HINT, None),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra(
    statement: str, hidden: tuple[str, ...], none: tuple[str, ...], extra: str, hint: str, missing: str | None
) -> None:
    seen = import_hiding(statement, hidden, none)
    assert seen["type"] == "MissingExtraError", seen
    assert seen["gatekeeper"] and seen["module_not_found"]  # except ImportError / GatekeeperError both catch it
    assert seen["extra"] == extra
    assert hint in str(seen["message"])
    assert seen["cause"] == "ModuleNotFoundError"  # the original error is chained
    assert seen["name"] == seen["cause_name"]  # .name is the module that was missing, as on the original
    assert str(seen["name"]).split(".")[0] in (hidden or none)
    if missing is not None:
        assert seen["name"] == missing


@pytest.mark.parametrize(("statement", "extra"), [
    ("import langchain.agents.middleware.types as t; del t.ExtendedModelResponse; import langchain_gatekeeper",
     "langchain"),
    ("import llama_index.core.base.llms.types as t; del t.ToolCallBlock; import llamaindex_gatekeeper", "llamaindex"),
])
def test_a_framework_too_old_for_the_adapter_names_the_extra_and_says_upgrade(statement: str, extra: str) -> None:
    seen = import_hiding(statement)  # a name the adapter imports is missing, though the versions are new enough
    assert seen["type"] == "MissingExtraError" and seen["gatekeeper"] and seen["extra"] == extra, seen
    assert "do not fit together" in str(seen["message"]) and seen["cause"] == "ImportError"


def test_a_framework_below_the_adapters_floor_is_named_with_the_floor() -> None:
    from unittest import mock

    from context_gatekeeper.errors import MissingExtraError

    failed = ImportError("cannot import name 'ToolCallBlock'", name="llama_index.core.base.llms.types")
    with mock.patch("importlib.metadata.version", lambda dist: {"llama-index-core": "0.14.4"}[dist]):
        error = MissingExtraError.of_framework(failed, adapter="llamaindex_gatekeeper", needs="llama-index-core",
                                               extra="llamaindex", packages=frozenset({"llama_index"}),
                                               floors={"llama-index-core": "0.14.5"})
    assert error is not None and "llama-index-core 0.14.4 is installed and the adapter needs >= 0.14.5" in str(error)


@pytest.mark.parametrize(("statement", "hidden", "extra"), [
    ("from context_gatekeeper import PostgresStore", ("psycopg", "psycopg_pool"), "postgres"),
    ("from context_gatekeeper import ContextGatekeeper; "
     "ContextGatekeeper(embedder=lambda texts: [[1.0] for _ in texts]).add_turn('a', 'b')", ("numpy",), "semantic"),
    ("import context_gatekeeper.testing.stores", ("hypothesis",), "testing"),
])
def test_a_core_feature_without_its_extra_names_the_extra(statement: str, hidden: tuple[str, ...], extra: str) -> None:
    seen = import_hiding(statement, hidden)
    assert seen["type"] == "MissingExtraError" and seen["gatekeeper"] and seen["extra"] == extra, seen
    assert MissingExtraError.install_command(extra) in str(seen["message"])


def test_the_llamaindex_adapter_imports_without_langchain() -> None:
    assert import_hiding("import llamaindex_gatekeeper", ("langchain_core", "langchain", "langgraph")) == {"type": None}


def test_a_missing_module_of_our_own_is_not_relabelled_as_a_missing_extra() -> None:
    # a broken install of the adapter itself is not fixed by installing LangChain: the
    # plain ModuleNotFoundError comes through, naming the module
    seen = import_hiding("import langchain_gatekeeper", ("langchain_gatekeeper.trim",))
    assert seen["type"] == "ModuleNotFoundError" and not seen["gatekeeper"], seen
    assert seen["name"] == "langchain_gatekeeper.trim"


def test_the_error_pickles_with_its_extra_and_module_name() -> None:
    import pickle

    from context_gatekeeper.errors import MissingExtraError

    error = MissingExtraError("needs LangChain", extra="langchain", name="langchain_core")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.extra, copy.name) == (MissingExtraError, "needs LangChain", "langchain", "langchain_core")


@pytest.mark.parametrize(("installed", "floor", "below"), [
    ("0.14.4", "0.14.5", True), ("0.14.25", "0.14.5", False), ("0.14.5rc1", "0.14.5", True),
    ("1.2.13.dev3", "1.2.13", True), ("1.0.0a5", "1.0", True), ("1", "1.0", False), ("1!0.1", "1.0", False),
    ("1.2.13+cpu", "1.2.13", False), ("1.2.13.post1", "1.2.13", False),
])
def test_versions_compare_as_pep_440_orders_them(installed: str, floor: str, below: bool) -> None:
    from context_gatekeeper.errors import _release

    assert (_release(installed) < _release(floor)) is below


def test_unreadable_framework_metadata_still_gives_the_librarys_error() -> None:
    from unittest import mock

    from context_gatekeeper.errors import MissingExtraError

    failed = ImportError("cannot import name 'ExtendedModelResponse'", name="langchain.agents.middleware.types")
    with mock.patch("importlib.metadata.version", lambda dist: None):  # a dist-info left without METADATA
        error = MissingExtraError.of_framework(failed, adapter="langchain_gatekeeper", needs="LangChain",
                                               extra="langchain", packages=frozenset({"langchain"}),
                                               floors={"langchain": "1.2.13"})
    assert error is not None and "do not fit together" in str(error) and "()" not in str(error)


# -- the install command an error gives ---------------------------------------------------------
class _Dist:
    """A distribution record with (or without) a PEP 610 ``direct_url.json``."""

    def __init__(self, direct_url: str | None) -> None:
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        return self.direct_url if name == "direct_url.json" else None


@pytest.mark.parametrize(("records", "command"), [
    # pip install -e ".[dev]" in a checkout (a build's egg-info without the record may come first)
    ([None, '{"url": "file:///home/me/context-gatekeeper", "dir_info": {"editable": true}}'],
     "pip install -e '/home/me/context-gatekeeper[postgres]'"),
    (['{"url": "file:///srv/my%20copy", "dir_info": {}}'], "pip install '/srv/my copy[postgres]'"),
    # a wheel file, an archive URL, a repository: a direct reference to it
    (['{"url": "file:///tmp/dist/context_gatekeeper-0.2.0-py3-none-any.whl", "archive_info": {}}'],
     "pip install 'context-gatekeeper[postgres] @ file:///tmp/dist/context_gatekeeper-0.2.0-py3-none-any.whl'"),
    (['{"url": "https://github.com/o/context-gatekeeper", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}'],
     "pip install 'context-gatekeeper[postgres] @ git+https://github.com/o/context-gatekeeper@abc123'"),
    # a package in a subfolder; a local repository (pip wants file://localhost/...)
    (['{"url": "file:///src/mono", "subdirectory": "python/cg", "vcs_info": {"vcs": "git", "commit_id": "6fb"}}'],
     "pip install 'context-gatekeeper[postgres] @ git+file://localhost/src/mono@6fb#subdirectory=python/cg'"),
    (['{"url": "https://example.com/mono.tar.gz", "subdirectory": "cg", "archive_info": {}}'],
     "pip install 'context-gatekeeper[postgres] @ https://example.com/mono.tar.gz#subdirectory=cg'"),
    # from an index (no record), or a record that cannot be read: by name
    ([None], 'pip install "context-gatekeeper[postgres]"'),
    (["not json"], 'pip install "context-gatekeeper[postgres]"'),
    ([], 'pip install "context-gatekeeper[postgres]"'),
])
def test_the_install_command_names_the_folder_the_library_was_installed_from(
    monkeypatch: pytest.MonkeyPatch, records: list[str | None], command: str
) -> None:
    """The package is installed from a checkout (the README's command): a hint by name would
    send pip to an index, where no such package is published."""
    from importlib import metadata

    from context_gatekeeper import errors

    monkeypatch.setattr(metadata, "distributions", lambda **_: [_Dist(r) for r in records])
    errors._installed_from.cache_clear()
    try:
        assert MissingExtraError.install_command("postgres") == command
    finally:
        errors._installed_from.cache_clear()
