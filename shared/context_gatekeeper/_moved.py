"""Old module paths keep working for one release, with a DeprecationWarning.

Version 0.2 grouped the core's flat modules into rooms (``selection``,
``transcripts``, ``editing``, ``stores``; see ``docs/architecture.md``).  Code
that imports a module by its old path (``import context_gatekeeper.edit_format``,
``from context_gatekeeper.tokens import ...``, an old pickle naming
``context_gatekeeper.messages.Message``) gets the module at its new path, once,
with a :class:`DeprecationWarning` naming where it lives now.  The names
exported by :mod:`context_gatekeeper` itself never moved.

``context_gatekeeper.selection`` and ``context_gatekeeper.editing`` were modules
and are now rooms; their packages re-export what the modules exported, so they
need no alias.  The aliases go in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "install"]

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
        warnings.warn(
            f"{spec.name} moved to {new} in context-gatekeeper 0.2; import it from there "
            f"(or the public names from context_gatekeeper). The old path goes in 0.3.",
            DeprecationWarning,
            stacklevel=2,  # warnings skips the import machinery's frames: this is the importer
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module at the new path is already executed."""


def install() -> None:
    """Put the alias finder last on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
