"""Serialisation of :class:`~llamaindex_gatekeeper.memory.GatekeeperMemory`: state and history.

``to_dict`` writes the session's full revision log as JSON-ready data (no
``SimpleChatStore``, whose serialisation fails under pydantic >= 2.14); ``from_dict``
replays it into a store.  LlamaIndex's ``to_json`` / ``from_json`` and the workflow
``Context`` serialiser go through these two, so an agent context that holds the
memory round-trips with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from context_gatekeeper import Revision
from context_gatekeeper.stores import InMemoryStore

if TYPE_CHECKING:
    from context_gatekeeper import Transcript

__all__ = ["SerialisationMixin"]

_SCALAR_OPTIONS = (str, int, float, bool, type(None))


class SerialisationMixin:
    """``to_dict`` / ``from_dict``; needs ``_options``, ``_transcript``, ``session_id``,
    ``token_limit``, ``class_name`` and ``history`` on the host."""

    _options: dict[str, Any]
    _transcript: "Transcript"
    session_id: str
    token_limit: int

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """State and full revision history as JSON-ready data (no SimpleChatStore involved).

        Scalar options are kept; a custom token counter, ``params`` object or editing
        model is not: pass it again to :meth:`from_dict`.
        """
        options = {k: v for k, v in self._options.items() if isinstance(v, _SCALAR_OPTIONS)}
        return {
            "class_name": self.class_name(),
            "session_id": self.session_id,
            "token_limit": self.token_limit,
            "options": options,
            "revisions": [r.to_dict() for r in self._transcript.history()],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> Any:  # type: ignore[override]
        """Rebuild a memory from :meth:`to_dict` output.

        The revisions are written into ``store=`` (default: a new in-memory store).  A
        store whose session already holds exactly these revisions (a SQLite file the
        memory lived in) is attached as it is; one holding other revisions is refused
        (``ValueError``).  Other keyword arguments are constructor options (``model``,
        ``token_counter``, ``params``, ...).  Revision times are those of the import.
        """
        options = {**data.get("options", {}), **kwargs}
        store = options.pop("store", None) or InMemoryStore()
        memory = cls(token_limit=data["token_limit"], session_id=data["session_id"], store=store, **options)
        revisions = [Revision.from_dict(entry) for entry in data.get("revisions", [])]
        existing = memory.history()
        if existing:
            if [(r.number, r.kind) for r in existing] != [(r.number, r.kind) for r in revisions]:
                raise ValueError(
                    f"session {memory.session_id!r} already has other revisions in that store; "
                    "pass an empty store (or another session_id)"
                )
            return memory
        for revision in revisions:
            memory.store.commit(memory.session_id, revision, expected_head=revision.number - 1)
        return memory
