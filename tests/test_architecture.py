"""The house rules, checked: rooms by concern, one-way arrows, one declared surface.

``docs/architecture.md`` describes the rooms; these tests keep the code that way.
They read the source with :mod:`ast` (no import side effects), so a new import that
breaks a rule fails here with the file and line that added it.
"""

from __future__ import annotations

import ast
import importlib
import json
import pickle
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import context_gatekeeper
import context_gatekeeper.integration as integration
from context_gatekeeper._moved import MOVED

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "shared" / "context_gatekeeper"
ADAPTERS = [REPO / "langchain_gatekeeper", REPO / "llamaindex_gatekeeper"]

# What a reader sees in shared/context_gatekeeper/: the rooms and the foundation.
ROOMS = {"selection", "transcripts", "editing", "stores", "chat", "testing"}
FOUNDATION = {"caching", "errors", "tokens", "validation"}
TOP_LEVEL_MODULES = FOUNDATION | {"__init__", "integration", "_moved"}

# The transcript records: the data model that editing and stores share.
RECORDS = {"transcripts.messages", "transcripts.operations", "transcripts.revisions", "transcripts.replay"}


def module_name(path: Path) -> str:
    """``context_gatekeeper.selection.gate`` for ``.../context_gatekeeper/selection/gate.py``."""
    parts = list(path.relative_to(CORE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: str) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports (relative imports resolved against ``package``),
    with its line, lazy imports inside functions included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                yield node.lineno, ".".join(base + ([node.module] if node.module else []))
            elif node.module:
                yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def core_imports(path: Path) -> Iterator[tuple[int, str]]:
    """The ``context_gatekeeper`` modules a core module imports, without the prefix
    (``""`` for the package itself)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for line, target in imports_of(path, package):
        if target == "context_gatekeeper":
            yield line, ""
        elif target.startswith("context_gatekeeper."):
            yield line, target[len("context_gatekeeper.") :]


def core_modules() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if "__pycache__" not in p.parts)


def short(path: Path) -> str:
    return module_name(path)[len("context_gatekeeper.") :] if "." in module_name(path) else ""


def test_the_package_folder_shows_the_rooms_and_nothing_else() -> None:
    folders = {p.name for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    modules = {p.stem for p in CORE.glob("*.py")}
    assert folders == ROOMS, f"rooms are {sorted(ROOMS)}; a new concern gets a room and a line in docs/architecture.md"
    assert modules == TOP_LEVEL_MODULES, (
        f"top-level modules are the foundation {sorted(FOUNDATION)} and the surface; "
        f"put {sorted(modules - TOP_LEVEL_MODULES)} in the room of its concern"
    )


def test_every_room_is_packaged_in_the_wheel() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    packages = {module_name(p) for p in CORE.rglob("__init__.py") if "__pycache__" not in p.parts}
    assert packages <= listed, f"add {sorted(packages - listed)} to [tool.setuptools] packages in pyproject.toml"


def allowed(source: str, target: str) -> bool:
    """May core module ``source`` import core module ``target`` (names without the prefix)?"""
    room = source.split(".")[0] if source else ""
    target_room = target.split(".")[0] if target else ""
    if target_room in FOUNDATION or target_room == room:
        if source in FOUNDATION:
            return target in FOUNDATION
        if source in RECORDS:
            return target in RECORDS or target_room in FOUNDATION
        return True
    if room == "selection":
        return False  # selection knows nothing of transcripts, editing or stores
    if room == "editing":
        return target in {"transcripts.messages", "transcripts.operations"}
    if room == "stores":
        return target in RECORDS or target == "selection.semantic.embedding"
    if room == "transcripts":
        if source in RECORDS:
            return False
        if target_room == "selection":  # the one bridge between the two halves
            return source == "transcripts.transcript_gate"
        return target_room in {"editing", "stores"}
    if room == "chat":
        return target in {"", "integration"}  # an application of the public surface
    if room == "testing":
        return target_room != "chat"
    return room in {"", "integration", "_moved"} and target_room != "chat"  # the surface re-exports


def test_arrows_between_rooms_are_one_way() -> None:
    broken = [
        f"{path.relative_to(REPO)}:{line} imports context_gatekeeper.{target}"
        for path in core_modules()
        for line, target in core_imports(path)
        if not allowed(short(path), target)
    ]
    assert not broken, "imports against the arrows of docs/architecture.md#rooms-and-arrows:\n" + "\n".join(broken)


def test_the_checker_itself_refuses_the_wrong_arrows() -> None:
    assert not allowed("selection.gate", "transcripts.messages")
    assert not allowed("selection.semantic.channel", "stores.vectors")
    assert not allowed("editing.compute", "transcripts.transcript")
    assert not allowed("transcripts.messages", "editing.models")
    assert not allowed("transcripts.transcript", "selection.gatekeeper")
    assert not allowed("stores.sqlite", "transcripts.transcript")
    assert not allowed("chat.session", "transcripts.messages")
    assert not allowed("errors", "selection.gate")
    assert allowed("transcripts.transcript_gate", "selection.gatekeeper")
    assert allowed("stores.vector_cache", "selection.semantic.embedding")
    assert allowed("chat.session", "integration")


def adapter_files() -> list[Path]:
    return sorted(p for root in ADAPTERS for p in root.rglob("*.py"))


@pytest.mark.parametrize("path", adapter_files() + sorted((CORE / "chat").glob("*.py")), ids=lambda p: p.name)
def test_adapters_and_the_chat_use_only_the_declared_surface(path: Path) -> None:
    in_core = CORE in path.parents
    package = module_name(path).rsplit(".", 1)[0] if in_core else path.parent.name
    outside = [
        f"line {line}: {target}"
        for line, target in imports_of(path, package)
        if target.startswith("context_gatekeeper")
        and target not in {"context_gatekeeper", "context_gatekeeper.integration"}
        and not target.startswith("context_gatekeeper.chat")
    ]
    assert not outside, (
        f"{path.relative_to(REPO)} reaches into the core's rooms: {outside}; import public names from "
        "context_gatekeeper, or declare the name in context_gatekeeper.integration"
    )


def test_every_integration_name_is_used_and_none_is_already_public() -> None:
    sources = "\n".join(p.read_text(encoding="utf-8") for p in adapter_files() + list((CORE / "chat").glob("*.py")))
    unused = [name for name in integration.__all__ if name not in sources]
    assert not unused, f"declared but used by no adapter: {unused}; drop them from context_gatekeeper.integration"
    assert not set(integration.__all__) & set(context_gatekeeper.__all__), "a public name needs no second home"
    assert sorted(integration.__all__) == sorted(set(integration.__all__))
    for name in integration.__all__:
        assert hasattr(integration, name), name


def test_importing_the_surface_pulls_in_no_framework_or_optional_dependency() -> None:
    code = (
        "import sys, context_gatekeeper, context_gatekeeper.integration, context_gatekeeper.testing\n"
        "heavy = [m for m in ('numpy', 'psycopg', 'psycopg_pool', 'langchain_core', 'llama_index', 'google.genai',"
        " 'pytest', 'hypothesis') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# -- old module paths ------------------------------------------------------------------------


def test_every_old_module_path_still_imports_with_a_deprecation_warning() -> None:
    # a fresh interpreter, where no alias sits in sys.modules yet; each old path is
    # imported by an ``import`` statement of its own, as user code would
    code = (
        "import importlib, json, warnings\n"
        f"moved = {dict(MOVED)!r}\n"
        "seen = {}\n"
        "for old, new in moved.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        namespace = {}\n"
        "        exec(compile(f'import context_gatekeeper.{old} as module', '<user code>', 'exec'), namespace)\n"
        "    real = importlib.import_module(f'context_gatekeeper.{new}')\n"
        "    same = namespace['module'] is real and real.__spec__.name == real.__name__\n"
        "    seen[old] = [same] + [[w.category.__name__, str(w.message), w.filename] for w in caught]\n"
        "print(json.dumps(seen))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert sorted(seen) == sorted(MOVED)
    for old, (same, *caught) in seen.items():
        assert same, f"context_gatekeeper.{old} is not the module at its new path, or relabelled it"
        assert [c[0] for c in caught] == ["DeprecationWarning"], (old, caught)
        assert f"context_gatekeeper.{MOVED[old]}" in caught[0][1], (old, caught)
        assert caught[0][2] == "<user code>", f"the warning for {old} points at {caught[0][2]}, not the importing line"


ALIAS_ROUTES = """
import importlib, warnings
from unittest import mock
def caught(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [(w.category.__name__, w.filename, w.lineno) for w in seen]
import context_gatekeeper as cg
def patched():
    with mock.patch("context_gatekeeper.gemini.GeminiModel"):  # line 11
        pass
print(caught(lambda: importlib.import_module("context_gatekeeper.anchors")))  # line 13
print(caught(patched))
print(caught(lambda: cg.gatekeeper))  # line 15
print(cg.gatekeeper is importlib.import_module("context_gatekeeper.selection.gatekeeper"))
real = importlib.import_module("context_gatekeeper.transcripts.transcript")
import context_gatekeeper.transcript
importlib.reload(real)
print(real.__spec__.name, real.__package__)
"""


def test_every_route_to_an_old_module_warns_at_the_callers_line_and_keeps_the_real_module() -> None:
    out = subprocess.run([sys.executable, "-c", ALIAS_ROUTES], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    import_module, patch, attribute, same, spec = out.stdout.strip().splitlines()
    assert ast.literal_eval(import_module) == [("DeprecationWarning", "<string>", 13)]
    assert ast.literal_eval(patch) == [("DeprecationWarning", "<string>", 11)]
    assert ast.literal_eval(attribute) == [("DeprecationWarning", "<string>", 15)]
    assert same == "True"
    assert spec == "context_gatekeeper.transcripts.transcript context_gatekeeper.transcripts"


def test_a_stale_file_at_an_old_path_never_shadows_the_alias(tmp_path: Path) -> None:
    (tmp_path / "messages.py").write_text("STALE = True\n")  # as an old build folder would leave it
    code = (
        "import warnings, context_gatekeeper\n"
        f"context_gatekeeper.__path__.append({str(tmp_path)!r})\n"
        "warnings.simplefilter('ignore')\n"
        "import context_gatekeeper.messages as m\n"
        "print(m.__name__, hasattr(m, 'STALE'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["context_gatekeeper.transcripts.messages", "False"]


def test_every_moved_module_exists_at_its_new_path() -> None:
    for new in MOVED.values():
        assert importlib.util.find_spec(f"context_gatekeeper.{new}") is not None, new
    assert not set(MOVED) & {p.stem for p in CORE.glob("*.py")}, "an alias may not shadow a real module"


def test_from_import_of_an_old_module_and_of_its_names_works() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from context_gatekeeper import edit_format  # type: ignore[attr-defined]
        from context_gatekeeper.gate import Decision  # type: ignore[import-not-found]

    assert edit_format.__name__ == "context_gatekeeper.editing.format"
    assert Decision is context_gatekeeper.Decision


def test_a_pickle_naming_an_old_module_path_still_loads() -> None:
    message = context_gatekeeper.Message("m1", "user", "hello")
    data = pickle.dumps(message, protocol=2)
    old = data.replace(b"context_gatekeeper.transcripts.messages", b"context_gatekeeper.messages")
    assert old != data
    with pytest.warns(DeprecationWarning, match="context_gatekeeper.transcripts.messages"):
        loaded = subprocess_free_loads(old)
    assert loaded == message


def subprocess_free_loads(data: bytes) -> object:
    """Unpickle with the old alias forgotten, as a new process would see it."""
    saved = sys.modules.pop("context_gatekeeper.messages", None)
    try:
        return pickle.loads(data)
    finally:
        if saved is not None:
            sys.modules["context_gatekeeper.messages"] = saved


def test_the_former_selection_and_editing_modules_are_rooms_that_keep_their_names() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from context_gatekeeper.editing import EditResult, compute_edit
        from context_gatekeeper.selection import Evidence, Selection, Turn, TurnScore

    assert compute_edit is integration.compute_edit and EditResult is integration.EditResult
    assert (Turn, Selection, Evidence, TurnScore) == (
        context_gatekeeper.Turn,
        context_gatekeeper.Selection,
        context_gatekeeper.Evidence,
        context_gatekeeper.TurnScore,
    )


def test_the_readme_layout_names_every_room_adapter_module_and_benchmark() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout") : readme.index("\n## ", readme.index("## Layout") + 1)]
    expected = {f"{room}/" for room in ROOMS} | {"semantic/"} | {f"{m}.py" for m in TOP_LEVEL_MODULES - {"__init__"}}
    expected |= {p.name for root in ADAPTERS for p in root.glob("*.py") if p.name != "__init__.py"}
    expected |= {p.name for p in (REPO / "benchmarks").glob("*.py")}
    missing = sorted(name for name in expected if name not in layout)
    assert not missing, f"README.md's Layout section does not mention {missing}"
