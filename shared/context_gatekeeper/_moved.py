"""Old module paths keep working for one release, with a DeprecationWarning.

Version 0.2 grouped the core's flat modules into rooms (``selection``,
``transcripts``, ``editing``, ``stores``; see ``docs/architecture.md#old-module-paths``).
Code that reaches a module by its old path (``import context_gatekeeper.edit_format``,
``from context_gatekeeper.gate import Decision``, ``context_gatekeeper.gatekeeper``
as an attribute, ``mock.patch("context_gatekeeper.gemini.GeminiModel")``, an old
pickle naming ``context_gatekeeper.messages.Message``) gets the module at its new
path, the very same module object, with a :class:`DeprecationWarning` that names
where it lives now and points at the caller's line.  The names exported by
:mod:`context_gatekeeper` itself never moved.

``context_gatekeeper.selection`` and ``context_gatekeeper.editing`` were modules
and are now rooms; their packages re-export the public names the modules
exported, so they need no alias.  The aliases go in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from types import FrameType, ModuleType

__all__ = ["MOVED", "install", "moved_attribute"]

#: old module name (under ``context_gatekeeper.``) -> its home now
MOVED: dict[str, str] = {
    "anchors": "selection.anchors",
    "stopwords": "selection.stopwords",
    "glossary": "selection.glossary",
    "cues": "selection.cues",
    "index": "selection.index",
    "history": "selection.history",
    "segments": "selection.segments",
    "gate": "selection.gate",
    "scoring": "selection.scoring",
    "selector": "selection.selector",
    "params": "selection.params",
    "coverage": "selection.coverage",
    "gatekeeper": "selection.gatekeeper",
    "embedding": "selection.semantic.embedding",
    "embed_runner": "selection.semantic.runner",
    "semantic": "selection.semantic.fusion",
    "semantic_channel": "selection.semantic.channel",
    "semantic_methods": "selection.semantic.methods",
    "turn_vectors": "selection.semantic.turn_vectors",
    "coverage_meaning": "selection.semantic.coverage",
    "messages": "transcripts.messages",
    "operations": "transcripts.operations",
    "revisions": "transcripts.revisions",
    "replay": "transcripts.replay",
    "transcript": "transcripts.transcript",
    "transcript_async": "transcripts.transcript_async",
    "versioned": "transcripts.versioned",
    "transcript_gate": "transcripts.transcript_gate",
    "models": "editing.models",
    "finish_reasons": "editing.finish_reasons",
    "gemini": "editing.gemini",
    "edit_options": "editing.options",
    "edit_format": "editing.format",
    "edit_parse": "editing.parse",
    "edit_checks": "editing.checks",
}

_PREFIX = "context_gatekeeper."

# Frames between the user's line and the alias: the import machinery (frozen or
# ``importlib/__init__.py``, reached through ``importlib.import_module``),
# ``unittest.mock`` (``patch("old.path.name")``), ``pkgutil`` and this package's own
# ``__init__`` (attribute access).
_PASSING_THROUGH = (
    os.path.dirname(importlib.__file__) + os.sep,
    os.path.join(os.path.dirname(os.__file__), "unittest", "mock.py"),
    os.path.join(os.path.dirname(os.__file__), "pkgutil.py"),
    os.path.dirname(__file__) + os.sep + "__init__.py",
    __file__,
)


def _skipped_by_warnings(frame: FrameType) -> bool:
    """Frames :func:`warnings.warn` never counts in ``stacklevel`` (its own rule)."""
    name = frame.f_code.co_filename
    return "importlib" in name and "_bootstrap" in name


def _caller_stacklevel() -> int:
    """The ``stacklevel`` for a warning sent by this function's caller that points at
    the first line outside the import machinery, ``unittest.mock`` and this package."""
    frame: FrameType | None = sys._getframe(1)  # the sender of the warning: level 1
    level = 1
    while frame is not None:
        nxt = frame.f_back
        while nxt is not None and _skipped_by_warnings(nxt):
            nxt = nxt.f_back
        if nxt is None:
            return level
        level, frame = level + 1, nxt
        if not nxt.f_code.co_filename.startswith(_PASSING_THROUGH) and not _skipped_by_warnings(nxt):
            return level
    return level


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"{old} moved to {new} in context-gatekeeper 0.2; import it from there "
        f"(or the public names from context_gatekeeper). The old path goes in 0.3.",
        DeprecationWarning,
        stacklevel=_caller_stacklevel(),
    )


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and hands out the module at its new one."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PREFIX) or fullname[len(_PREFIX) :] not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = _PREFIX + MOVED[spec.name[len(_PREFIX) :]]
        _warn(spec.name, new)
        module = importlib.import_module(new)
        # the import system sets ``__spec__`` of whatever we return to the alias's
        # spec; keep the real one, which exec_module puts back, so the module's own
        # relative imports, reloads and repr stay those of its real home
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module at the new path is already executed: only undo the relabelling."""
        alias = module.__spec__
        if alias is not None and isinstance(alias.loader_state, importlib.machinery.ModuleSpec):
            module.__spec__ = alias.loader_state


def moved_attribute(name: str) -> ModuleType | None:
    """``context_gatekeeper.<old name>`` as an attribute (0.1's ``__init__`` imported
    its modules): the module at its new path, with the same warning; ``None`` when
    ``name`` is not an old module name."""
    if name not in MOVED:
        return None
    _warn(_PREFIX + name, _PREFIX + MOVED[name])
    return importlib.import_module(_PREFIX + MOVED[name])


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (once), so a stale file left
    at an old path (an old build folder, a half-upgraded site-packages) never wins."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())
