"""Transcripts room: the versioned conversation state.

:mod:`.transcript` (``Transcript``: append, edit, apply, undo, redo, revert over a
store, each with its async twin), :mod:`.versioned` (the version operations adapters expose) and
:mod:`.transcript_gate` (``TranscriptGate``: the one bridge from transcripts to the
selection room).  The records it keeps live one room below, in
:mod:`context_gatekeeper.records`.

This package imports nothing on its own.  Public names come from
:mod:`context_gatekeeper`.  See ``docs/architecture.md``.
"""
