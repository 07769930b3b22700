"""The terminal chat: ``gatekeeper-chat`` / ``python -m context_gatekeeper.chat``.

A chat with Gemini (or, with ``--offline``, a scripted model) whose every call
sends only the gated context (:class:`~context_gatekeeper.TranscriptGate`) and whose
history can be revised in natural language, with undo, redo, diffs and a view of
what the model saw and why.  The transcript lives in a SQLite file, so nothing is
lost on Ctrl-C, SIGTERM or a model error; ``--session NAME`` resumes a conversation.

Importing this package imports nothing beyond the standard library and the core:
``rich`` (the ``chat`` extra) is needed only by the modules that draw the screen,
and :func:`app.main` says how to install it when it is missing.

Modules: :mod:`.app` (command line), :mod:`.loop` (the read-eval loop),
:mod:`.commands` (slash commands), :mod:`.session` (chat and edit logic, no UI),
:mod:`.pins` (the pin records and the name rules),
:mod:`.render` (rich output), :mod:`.visible` (how both chats draw characters a
screen would act on), :mod:`.signals` (SIGTERM as Ctrl-C, for both chats),
:mod:`.readers` (pluggable input),
:mod:`.offline` (the scripted models of ``--offline``), :mod:`.session_file`
(the ``/save`` / ``/load`` JSON format).
"""

from __future__ import annotations

__all__: list[str] = []
