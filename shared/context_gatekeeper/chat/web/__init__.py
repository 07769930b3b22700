"""The web chat: ``gatekeeper-chat --web`` (the ``web`` extra: Starlette and uvicorn).

The same session layer as the terminal chat (:mod:`..session`), in the browser:
answers of a model that streams (``--offline``'s, a LangChain chat model's, a
LlamaIndex LLM's: :func:`~..session.chat_reply_pieces`) stream in, Gemini's
appears whole, a context strip under each answer shows which earlier turns
the gate sent and which it left out (with its decision, each turn's reason and
the tokens saved), turns pin with one click, and an edit mode previews a
rewrite of the history side by side before Commit or Discard, with a revision
list to undo, redo or revert from.  Every asset is served by this package (no
build step, no CDN), so it works offline.

Modules: :mod:`.service` (the operations, no HTTP), :mod:`.views` (the JSON the
page reads), :mod:`.server` (routes, safety checks, uvicorn), ``static/`` (the
page: ``index.html``, ``app.js``, ``style.css``).  Importing this package imports
neither Starlette nor uvicorn; :mod:`.server` does.
"""

from __future__ import annotations

__all__: list[str] = []
