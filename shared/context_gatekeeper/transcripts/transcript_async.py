"""The async twins of :class:`~context_gatekeeper.transcripts.transcript.Transcript`'s methods.

Each runs the store work in a worker thread (``asyncio.to_thread``) and awaits the
model's own async call for edits, so none blocks the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..editing.options import EditOptions, Strategy
from ..records.messages import Message
from ..records.operations import Request
from ..records.revisions import Diff, Proposal, Revision

__all__ = ["AsyncTranscriptMixin", "SyncTranscript"]


class SyncTranscript(Protocol):
    """What the async twins call: :class:`~context_gatekeeper.transcripts.transcript.Transcript`'s
    sync methods (the type checker holds ``Transcript`` to these signatures)."""

    @property
    def messages(self) -> tuple[Message, ...]: ...

    def append(
        self,
        user: str | None = None,
        assistant: str | None = None,
        *,
        messages: Iterable[Message | Mapping[str, Any]] = (),
        renew_taken_ids: bool = False,
    ) -> Revision: ...

    def commit(self, proposal: Proposal) -> Revision: ...

    def apply(self, requests: Sequence[Request]) -> Revision: ...

    def set(self, messages: Iterable[Message | Mapping[str, Any]]) -> Revision: ...

    def clear(self) -> Revision: ...

    def purge(self) -> None: ...

    def undo(self) -> Revision: ...

    def redo(self) -> Revision: ...

    def revert(self, revision: int) -> Revision: ...

    def history(self) -> list[Revision]: ...

    def record(self) -> list[Message]: ...

    def snapshot(self, revision: int) -> tuple[Message, ...]: ...

    def diff(self, a: int, b: int | None = None) -> Diff: ...

    def _edit_settings(self, options: EditOptions | None, strategy: Any, allow_large: Any) -> EditOptions: ...

    async def _apropose(self, instruction: str, model: Any, options: EditOptions) -> Proposal: ...


if TYPE_CHECKING:
    _Synchronous = SyncTranscript  # the mixin's methods see the sync ones through the protocol
else:
    _Synchronous = object  # at run time the mixin is a plain class


class AsyncTranscriptMixin(_Synchronous):
    """Async twins; mixed into :class:`Transcript`."""

    async def aget_messages(self) -> tuple[Message, ...]:
        """Async :attr:`messages`."""
        return await asyncio.to_thread(lambda: self.messages)

    async def aappend(
        self,
        user: str | None = None,
        assistant: str | None = None,
        *,
        messages: Iterable[Message | Mapping[str, Any]] = (),
        renew_taken_ids: bool = False,
    ) -> Revision:
        """Async :meth:`append`."""
        return await asyncio.to_thread(
            self.append, user, assistant, messages=list(messages), renew_taken_ids=renew_taken_ids
        )

    async def aedit(
        self,
        instruction: str,
        *,
        model: Any = None,
        strategy: Strategy | None = None,
        preview: bool = False,
        allow_large_deletion: bool | None = None,
        options: EditOptions | None = None,
    ) -> Revision | Proposal:
        """Async :meth:`edit`: the model is awaited, the store runs in a worker thread."""
        settings = self._edit_settings(options, strategy, allow_large_deletion)
        proposal = await self._apropose(instruction, model, settings)
        return proposal if preview else await self.acommit(proposal)

    async def acommit(self, proposal: Proposal) -> Revision:
        """Async :meth:`commit`."""
        return await asyncio.to_thread(self.commit, proposal)

    async def aapply(self, requests: Sequence[Request]) -> Revision:
        """Async :meth:`apply`."""
        return await asyncio.to_thread(self.apply, requests)

    async def aset(self, messages: Iterable[Message | Mapping[str, Any]]) -> Revision:
        """Async :meth:`set`."""
        return await asyncio.to_thread(self.set, list(messages))

    async def aclear(self) -> Revision:
        """Async :meth:`clear`."""
        return await asyncio.to_thread(self.clear)

    async def apurge(self) -> None:
        """Async :meth:`purge`."""
        await asyncio.to_thread(self.purge)

    async def aundo(self) -> Revision:
        """Async :meth:`undo`."""
        return await asyncio.to_thread(self.undo)

    async def aredo(self) -> Revision:
        """Async :meth:`redo`."""
        return await asyncio.to_thread(self.redo)

    async def arevert(self, revision: int) -> Revision:
        """Async :meth:`revert`."""
        return await asyncio.to_thread(self.revert, revision)

    async def ahistory(self) -> list[Revision]:
        """Async :meth:`history`."""
        return await asyncio.to_thread(self.history)

    async def arecord(self) -> list[Message]:
        """Async :meth:`record`."""
        return await asyncio.to_thread(self.record)

    async def asnapshot(self, revision: int) -> tuple[Message, ...]:
        """Async :meth:`snapshot`."""
        return await asyncio.to_thread(self.snapshot, revision)

    async def adiff(self, a: int, b: int | None = None) -> Diff:
        """Async :meth:`diff`."""
        return await asyncio.to_thread(self.diff, a, b)

