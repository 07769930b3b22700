"""Records room: the data model every other room shares.

:mod:`.messages` (``Message``), :mod:`.operations` (changes on ids and their
inverses), :mod:`.revisions` (``Revision``, ``Diff``, undo stacks) and
:mod:`.replay` (replaying changes over a state that moved).

Records sit below ``transcripts/``, ``editing/`` and ``stores/`` and import only
the foundation (``errors``, ``validation``).  This package imports nothing on its
own; public names come from :mod:`context_gatekeeper`.  See ``docs/architecture.md``.
"""
