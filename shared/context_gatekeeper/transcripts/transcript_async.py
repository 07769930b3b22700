"""The async twins of :class:`~context_gatekeeper.transcripts.transcript.Transcript`'s methods.

Each runs the store work in a worker thread (``asyncio.to_thread``) and awaits the
model's own async call for edits, so none blocks the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..editing.options import EditOptions, Strategy
from .messages import Message
from .operations import Request
from .revisions import Diff, Proposal, Revision

if TYPE_CHECKING:
    from .transcript import Transcript

__all__ = ["AsyncTranscriptMixin"]


class AsyncTranscriptMixin:
    """Async twins; mixed into :class:`Transcript`."""

    async def aget_messages(self: Transcript) -> tuple[Message, ...]:
        """Async :attr:`messages`."""
        return await asyncio.to_thread(lambda: self.messages)

    async def aappend(
        self: Transcript,
        user: str | None = None,
        assistant: str | None = None,
        *,
        messages: Iterable[Any] = (),
        renew_taken_ids: bool = False,
    ) -> Revision:
        """Async :meth:`append`."""
        return await asyncio.to_thread(
            self.append, user, assistant, messages=list(messages), renew_taken_ids=renew_taken_ids
        )

    async def aedit(
        self: Transcript,
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

    async def acommit(self: Transcript, proposal: Proposal) -> Revision:
        """Async :meth:`commit`."""
        return await asyncio.to_thread(self.commit, proposal)

    async def aapply(self: Transcript, requests: Sequence[Request]) -> Revision:
        """Async :meth:`apply`."""
        return await asyncio.to_thread(self.apply, requests)

    async def aset(self: Transcript, messages: Iterable[Message | Mapping[str, Any]]) -> Revision:
        """Async :meth:`set`."""
        return await asyncio.to_thread(self.set, list(messages))

    async def aclear(self: Transcript) -> Revision:
        """Async :meth:`clear`."""
        return await asyncio.to_thread(self.clear)

    async def apurge(self: Transcript) -> None:
        """Async :meth:`purge`."""
        await asyncio.to_thread(self.purge)

    async def aundo(self: Transcript) -> Revision:
        """Async :meth:`undo`."""
        return await asyncio.to_thread(self.undo)

    async def aredo(self: Transcript) -> Revision:
        """Async :meth:`redo`."""
        return await asyncio.to_thread(self.redo)

    async def arevert(self: Transcript, revision: int) -> Revision:
        """Async :meth:`revert`."""
        return await asyncio.to_thread(self.revert, revision)

    async def ahistory(self: Transcript) -> list[Revision]:
        """Async :meth:`history`."""
        return await asyncio.to_thread(self.history)

    async def arecord(self: Transcript) -> list[Message]:
        """Async :meth:`record`."""
        return await asyncio.to_thread(self.record)

    async def asnapshot(self: Transcript, revision: int) -> tuple[Message, ...]:
        """Async :meth:`snapshot`."""
        return await asyncio.to_thread(self.snapshot, revision)

    async def adiff(self: Transcript, a: int, b: int | None = None) -> Diff:
        """Async :meth:`diff`."""
        return await asyncio.to_thread(self.diff, a, b)

