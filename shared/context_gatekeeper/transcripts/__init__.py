"""Transcripts room: the versioned conversation state and its records.

Records (imported by editing and stores, and importing neither):
:mod:`.messages` (``Message``), :mod:`.operations` (changes on ids and their
inverses), :mod:`.revisions` (``Revision``, ``Diff``, undo stacks) and
:mod:`.replay` (replaying changes over a state that moved).

The state: :mod:`.transcript` (``Transcript``: append, edit, apply, undo, redo,
revert over a store), :mod:`.transcript_async` (its async twins),
:mod:`.versioned` (the version operations adapters expose) and
:mod:`.transcript_gate` (``TranscriptGate``: the one bridge from transcripts to
the selection room).

This package imports nothing on its own, so the record modules load without the
``Transcript`` machinery.  Public names come from :mod:`context_gatekeeper`.
See ``docs/architecture.md``.
"""
