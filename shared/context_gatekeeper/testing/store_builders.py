"""Builders and values for store tests: revisions made of real messages, as a transcript makes them.

Part of the store conformance suite (:mod:`context_gatekeeper.testing.stores`), and usable on
their own (they need neither pytest nor hypothesis)::

    store.commit("s", turn(1), expected_head=None)          # u1 and its answer a1
    store.commit("s", edit(message("u1"), "better"), expected_head=1)

Values: anything goes inside messages (content, parts, metadata: NUL characters and lone
surrogates included, since they travel as JSON text); session ids, instructions and model
names are any text without NUL (PostgreSQL text cannot hold it).
"""

from __future__ import annotations

import threading
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ..stores.base import Store
from ..records.messages import Message, Role
from ..records.operations import Applied, Change, Put, Remove
from ..records.revisions import Revision

__all__ = [
    "message", "append", "turn", "edit", "delete", "changed", "fill", "snapshot", "run_together", "raised", "put_ids",
    "NASTY_SESSIONS", "CONFUSABLE_SESSIONS", "NESTED", "CONTENTS",
]


def message(id: str, role: Role = "user", content: str | None = None, **fields: Any) -> Message:
    """A message with readable default text (``"text of <id>"``)."""
    return Message(id=id, role=role, content=f"text of {id}" if content is None else content, **fields)


def append(*messages: Message, after: str | None = None) -> Revision:
    """An ``append`` revision putting ``messages`` in order after message ``after``."""
    changes: list[Applied] = []
    for m in messages:
        changes.append(Put(m, after))
        after = m.id
    return Revision(number=0, parent=0, kind="append", changes=tuple(changes))


def turn(n: int, session_tag: str = "") -> Revision:
    """Turn ``n`` (a user question ``u<n>`` and its answer ``a<n>``) as one append."""
    return append(message(f"{session_tag}u{n}", "user"), message(f"{session_tag}a{n}", "assistant"))


def edit(before: Message, content: str) -> Revision:
    """An ``edit`` rewriting ``before``'s text."""
    return Revision(
        number=0,
        parent=0,
        kind="edit",
        changes=(Change(before, before.revised(content, 0)),),
        instruction=f"rewrite {before.id}",
        model="fake-model",
    )


def delete(m: Message, after: str | None) -> Revision:
    """An ``apply`` revision removing ``m`` (which follows message ``after``)."""
    return Revision(number=0, parent=0, kind="apply", changes=(Remove(m, after),))


def changed(revision: Revision, index: int = 0) -> Message:
    """The new version of the message that change ``index`` of ``revision`` rewrote (a ``Change``)."""
    change = revision.changes[index]
    if not isinstance(change, Change):
        raise AssertionError(f"change {index} of revision {revision.number} is a {type(change).__name__}, not a Change")
    return change.after


def fill(store: Store, session: str, turns: int) -> list[Revision]:
    """Append ``turns`` turns to ``session``; the stored revisions."""
    return [store.commit(session, turn(n), expected_head=None) for n in range(1, turns + 1)]


def snapshot(store: Store, session: str) -> tuple[int, list[Revision]]:
    """The head and the whole log of a session."""
    return store.head(session), store.revisions(session)


def run_together(*calls: Callable[[], object]) -> list[BaseException]:
    """Run ``calls`` in threads released together; the exceptions they raised."""
    start, errors = threading.Barrier(len(calls)), []

    def body(call: Callable[[], object]) -> None:
        try:
            start.wait()
            call()
        except BaseException as exc:  # returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(c,)) for c in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def raised(errors: Sequence[BaseException]) -> str:
    """What ``errors`` (those :func:`run_together` returns) were, for a failed check's message:
    each one's type and text, and the first one's traceback, which shows where the store raised
    it (an ``assert errors == []`` alone says only that the list was not empty)."""
    if not errors:
        return "nothing was raised"
    kinds = Counter(f"{type(error).__name__}: {error}" for error in errors)  # in the order first raised
    named = "; ".join(f"{count} x {kind}" if count > 1 else kind for kind, count in kinds.items())
    first = "".join(traceback.format_exception(type(errors[0]), errors[0], errors[0].__traceback__))
    return f"the calls raised {len(errors)} error(s): {named}\nthe first one:\n{first}"


def put_ids(revisions: list[Revision]) -> list[str]:
    """Ids of the messages the revisions put, in log order."""
    return [m.id for r in revisions for m in r.added]


NASTY_SESSIONS = [
    "plain",
    "'; DROP TABLE revisions; --",
    'Robert"); DELETE FROM revisions WHERE ("1"="1',
    "100% _wild_ \\escape\\ %s {} ?",
    "ünïcødé 会话 🚀👩‍👩‍👧",
    " spaces and\ttabs\nnewline ",
    "",
]
"""Session ids that must come back exactly."""

_SHARED_280 = "https://chat.example.com/workspace/acme/" + "x" * 240
CONFUSABLE_SESSIONS = [
    "a",
    "a ",  # equal to "a" where trailing spaces do not count (PAD SPACE collations, CHAR columns)
    "a:b",  # "a" a prefix of it (a key-prefix scan over "<session>:<number>" keys)
    "a/b",  # the same with a path-like separator
    "A",  # equal to "a" under a case-insensitive collation
    "\u00e9",  # é composed ...
    "e\u0301",  # ... and decomposed: equal under Unicode normalization
    _SHARED_280 + "/user/alice/" + "1" * 20,  # 312 characters, the first 280 shared
    _SHARED_280 + "/user/bob/" + "2" * 22,  # (a VARCHAR(255) column cuts both to one id)
]
"""Session ids a backend could take for one another: each must keep its own log."""

NESTED = {
    "tool_calls": [{"id": "call_1", "name": "search", "args": {"q": "it's; DROP", "n": 3, "deep": [1, [2, [3]]]}}],
    "floats": [0.1, -2.5e-300, 1e300, 12345678901234567890],
    "flags": {"yes": True, "no": False, "none": None},
    "ünï 🔑": "välue ✓",
}
"""Nested metadata that must come back exactly."""

CONTENTS = {
    "unicode": "Grüße aus Zürich — 東京で会いましょう — مرحبا — Ελληνικά",
    "emoji": "🙂🚀👩🏽‍💻🇮🇸 family: 👨‍👩‍👧‍👦",
    "large": ("All work and no play, 100 KB of it. 多语言🙂\n" * 2_500)[:100_000],
    "sql": "'); DROP TABLE revisions; -- \"quoted\" ; SELECT * FROM x WHERE a='b';",
    "empty": "",
    "control": "tab\there\r\nnul\x00byte\x7f",
    "markdown": "# Title\n\n- item `code`\n\n```python\nprint('hi')\n```\n",
}
"""Message texts that must come back exactly."""
