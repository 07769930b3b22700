"""Tamper evidence and optional capabilities as tests (part of the store conformance suite).

**Tamper evidence** (``Capabilities(tamper_evident=True)``, off by default so suites written
before it keep passing): a store that can tell a hand-edited log from the one it wrote (the
built-in SQL stores keep a hash chain, :mod:`context_gatekeeper.stores.chain`).  Turning it on
asks the test class for one more method, ``tamper(self, store, session, revision, how)``,
which changes the stored revision ``revision`` of ``session`` behind the store's back, as
someone editing the storage by hand would (keeping whatever per-row digest the store has, where
it is copied along):

* ``"alter"``: change its text;
* ``"delete"``: remove its row;
* ``"kind"``: give it the kind ``"bogus"``;
* ``"copy"``: replace it with revision ``revision`` of session :data:`COPIED_FROM` (same number,
  same message ids, other text), everything the store keeps for that row copied along (its
  digest included): a store checking each row on its own serves the other session's text;
* ``"swap"``: exchange its content (everything but its session and number, any digest
  included) with revision ``revision + 1``'s;
* ``"field"``: change a field besides the changes: its instruction (to any other text) and its
  time (by any amount).

The suite checks that reading the session then raises
:class:`~context_gatekeeper.errors.CorruptLogError` naming the session and that revision, and
that ``truncate(session, revision - 1)`` recovers the prefix, saying how many revisions it set
aside.  A store passes by chaining each row to the one before it and to its session (the
built-in SQL stores' hash chain, :mod:`context_gatekeeper.stores.chain`).

**Optional keywords.**  ``commit`` gained keywords after the first release
(:data:`~context_gatekeeper.stores.base.COMMIT_KEYWORDS`).  A store that lacks one keeps
working (the library does the work itself, :func:`~context_gatekeeper.stores.base.takes_keyword`);
the suite says which it lacks by skipping ``test_commit_takes_every_optional_keyword`` with a
reason naming them, and checks that appends renewing taken ids work on it either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import CorruptLogError
from ..stores.base import COMMIT_KEYWORDS, Store, takes_keyword
from ..transcripts.transcript import Transcript
from ._requires import pytest
from .store_builders import append, fill, message
from .store_modes import needs, unwrapped

__all__ = ["TamperContract", "TAMPERINGS", "COPIED_FROM"]

TAMPERINGS = ("alter", "delete", "kind", "copy", "swap", "field")
"""What ``tamper(store, session, revision, how)`` must be able to do (see the module docstring)."""

COPIED_FROM = "other"
"""The session whose revision ``"copy"`` copies (the test fills it first, with other text)."""

OpenStore = Callable[[], Store]


class TamperContract:
    """Hand-edited logs are named (capability ``tamper_evident``); optional ``commit``
    keywords are reported when missing and worked around."""

    def tamper(self, store: Store, session: str, revision: int, how: str) -> None:
        """Change stored revision ``revision`` of ``session`` behind ``store``'s back (see the module docstring)."""
        raise NotImplementedError(
            f"{type(self).__name__} declares Capabilities(tamper_evident=True): define tamper(self, store, session, "
            f"revision, how) changing a stored revision by hand, how being one of {TAMPERINGS}"
        )

    @needs("tamper_evident", "truncate")
    @pytest.mark.parametrize("how", TAMPERINGS)
    def test_a_revision_changed_behind_the_store_is_named(self, store: Store, open_store: OpenStore, how: str) -> None:
        for n in range(1, 5):  # the same ids as session "s", other text
            question, answer = message(f"u{n}", content=f"other's question {n}"), message(f"a{n}", "assistant", f"other's answer {n}")
            store.commit(COPIED_FROM, append(question, answer), expected_head=None)
        fill(store, "s", 6)
        self.tamper(unwrapped(store), "s", 3, how)
        with pytest.raises(CorruptLogError) as caught:
            Transcript("s", store=open_store())
        assert (caught.value.session_id, caught.value.revision) == ("s", 3), str(caught.value)
        assert len(Transcript(COPIED_FROM, store=store).messages) == 8  # other sessions unaffected
        set_aside = store.truncate("s", 2)
        assert set_aside == (3 if how == "delete" else 4), "truncate must count the revisions it set aside"
        reopened = Transcript("s", store=open_store())
        assert reopened.head == 2
        reopened.append(user="after the recovery", assistant="ok")
        assert store.head("s") == 3

    def test_commit_takes_every_optional_keyword(self, store: Store) -> None:
        missing = [name for name in COMMIT_KEYWORDS if not takes_keyword(unwrapped(store), name)]
        if missing:
            pytest.skip(
                f"{type(unwrapped(store)).__name__}.commit lacks the optional keyword(s) {missing}: "
                + "; ".join(f"{name}: {COMMIT_KEYWORDS[name]}" for name in missing)
            )

    def test_appends_renewing_taken_ids_work_with_or_without_the_keyword(self, store: Store) -> None:
        t = Transcript("s", store=store)
        t.append(messages=[{"id": "taken", "role": "user", "content": "first"}], renew_taken_ids=True)
        again: Any = t.append(messages=[{"id": "taken", "role": "user", "content": "other"}], renew_taken_ids=True)
        assert again.added[0].id != "taken"
        assert [m.content for m in Transcript("s", store=store).messages] == ["first", "other"]
