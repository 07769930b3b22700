"""Transcript: appends, explicit edits, undo/redo/revert, diff, record, provenance, stores."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import pytest

from context_gatekeeper import (
    Delete,
    HistoryError,
    InsertAfter,
    InvalidInputError,
    InvalidTypeError,
    Replace,
    SQLiteStore,
    StaleHeadError,
    Transcript,
    UnknownMessageError,
)
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import Change
from context_gatekeeper.records.revisions import Proposal
from context_gatekeeper.stores import InMemoryStore
from store_raw import LostReplyStore


def contents(t: Transcript) -> list[str]:
    return [m.content for m in t.messages]


@pytest.fixture
def gdp() -> Transcript:
    t = Transcript("gdp")
    t.append(user="What was Ireland's GDP in 2021?", assistant="About 504 billion USD.")
    t.append(user="What were its largest categories?", assistant="Industry, ICT and finance.")
    return t


def test_append_is_turn_atomic_and_recorded(gdp: Transcript) -> None:
    assert contents(gdp) == [
        "What was Ireland's GDP in 2021?",
        "About 504 billion USD.",
        "What were its largest categories?",
        "Industry, ICT and finance.",
    ]
    assert [r.kind for r in gdp.history()] == ["append", "append"]
    assert [len(r.changes) for r in gdp.history()] == [2, 2]
    assert [m.role for m in gdp.messages] == ["user", "assistant", "user", "assistant"]
    assert all(m.origin == "original" and m.derived_from == () for m in gdp.messages)
    assert [m.revision for m in gdp.messages] == [1, 1, 2, 2]
    assert gdp.record() == list(gdp.messages)


def test_apply_keeps_provenance_and_the_record(gdp: Transcript) -> None:
    q, a = gdp.messages[0], gdp.messages[1]
    revision = gdp.apply([Replace(q.id, "What was Iceland's GDP in 2022?"), Replace(a.id, "About 28 billion USD.")])
    now = gdp.messages
    assert (now[0].id, now[0].content, now[0].origin, now[0].derived_from) == (
        q.id, "What was Iceland's GDP in 2022?", "edited", (q.id,),
    )
    assert now[0].revision == revision.number == 3 and revision.kind == "apply"
    assert [m.content for m in gdp.record()][:2] == ["What was Ireland's GDP in 2021?", "About 504 billion USD."]
    inserted = gdp.apply([InsertAfter(a.id, "user", "Per capita too?")]).added[0]
    assert gdp.messages[2].id == inserted.id and gdp.messages[2].origin == "inserted"
    gdp.apply([Delete(inserted.id)])
    assert inserted.id not in {m.id for m in gdp.messages}
    assert inserted.id not in {m.id for m in gdp.record()}  # insertions by edits are not what was said


def test_undo_after_an_edit_keeps_turns_appended_after_it(gdp: Transcript) -> None:
    q = gdp.messages[0]
    edit = gdp.apply([Replace(q.id, "What was Iceland's GDP in 2022?")])
    gdp.append(user="And per capita?", assistant="About 75,000 USD.")
    undo = gdp.undo()
    assert undo.kind == "undo" and undo.target == edit.number
    assert contents(gdp)[0] == "What was Ireland's GDP in 2021?"
    assert contents(gdp)[-2:] == ["And per capita?", "About 75,000 USD."]
    redo = gdp.redo()
    assert redo.kind == "redo" and redo.target == edit.number
    assert contents(gdp)[0] == "What was Iceland's GDP in 2022?"
    assert contents(gdp)[-2:] == ["And per capita?", "About 75,000 USD."]


def test_undo_walks_back_and_redo_is_discarded_by_a_new_change(gdp: Transcript) -> None:
    q = gdp.messages[0]
    gdp.apply([Replace(q.id, "v2")])
    gdp.apply([Replace(q.id, "v3")])
    gdp.undo()
    assert contents(gdp)[0] == "v2"
    gdp.undo()
    assert contents(gdp)[0] == "What was Ireland's GDP in 2021?"
    with pytest.raises(HistoryError, match="nothing to undo"):
        gdp.undo()
    gdp.redo()
    assert contents(gdp)[0] == "v2"
    gdp.apply([Replace(q.id, "v4")])
    with pytest.raises(HistoryError, match="nothing to redo"):
        gdp.redo()
    head = gdp.head
    with pytest.raises(HistoryError):
        gdp.redo()
    assert gdp.head == head  # a refused redo records nothing


def test_appends_are_not_undone(gdp: Transcript) -> None:
    with pytest.raises(HistoryError):
        gdp.undo()
    assert len(gdp.messages) == 4


def test_revert_goes_back_and_says_what_it_drops(gdp: Transcript) -> None:
    gdp.apply([Replace(gdp.messages[0].id, "Iceland 2022?")])
    gdp.append(user="Per capita?", assistant="75,000 USD.")
    revert = gdp.revert(1)
    assert revert.kind == "revert" and revert.target == 1
    assert contents(gdp) == ["What was Ireland's GDP in 2021?", "About 504 billion USD."]
    assert {m.content for m in revert.removed} == {
        "What were its largest categories?", "Industry, ICT and finance.", "Per capita?", "75,000 USD.",
    }
    gdp.undo()  # a revert is state-changing: undo brings everything back
    assert contents(gdp)[0] == "Iceland 2022?" and contents(gdp)[-1] == "75,000 USD."
    with pytest.raises(HistoryError, match="no revision"):
        gdp.revert(99)


def test_a_revision_that_moves_messages_lists_them_as_moved_not_removed_or_added() -> None:
    t = Transcript("order")
    t.append(user="q1", assistant="a1")
    t.append(user="q2", assistant="a2")
    m = t.messages
    swap = t.set([m[2], m[3], m[0], m[1]])  # the same messages, the second exchange first
    back = t.revert(2)  # revision 2's order again: nothing is dropped
    assert contents(t) == ["q1", "a1", "q2", "a2"]
    for revision, diff in ((swap, t.diff(2, 3)), (back, t.diff(3, 4))):
        assert revision.removed == () and revision.added == ()
        assert {x.id for x in revision.moved} == {d.id for d in diff.moved} and len(revision.moved) == 2
    undo = t.undo()  # the inverse of a move is a move
    assert undo.removed == undo.added == () and len(undo.moved) == 2
    q2, a2, q1, a1 = t.messages
    assert contents(t) == ["q2", "a2", "q1", "a1"]
    mixed = t.set([q1, q2, {"role": "user", "content": "q3"}])  # one moved, two dropped, one new
    assert [x.content for x in mixed.added] == ["q3"]
    assert sorted(x.content for x in mixed.removed) == ["a1", "a2"]
    assert [x.content for x in mixed.moved] in (["q1"], ["q2"])


def test_a_diff_breaks_lines_at_newlines_only_so_every_line_keeps_its_mark(gdp: Transcript) -> None:
    """A carriage return, form feed or line separator inside a message is part of its line:
    every body line of the hunk starts with its mark (the pieces split at them had none)."""
    a = gdp.messages[1]
    revision = gdp.apply([Replace(a.id, "About 28 billion USD.\rOr 30.\u2028Maybe\x0c31.\nSource: IMF.")])
    lines = str(gdp.diff(revision.parent, revision.number)).split("\n")
    body = lines[lines.index(next(line for line in lines if line.startswith("@@"))) + 1:]
    assert body and all(line[:1] in ("+", "-", " ") for line in body if line), body
    assert "+About 28 billion USD.\rOr 30.\u2028Maybe\x0c31." in body and "+Source: IMF." in body


def test_diff_is_a_record_and_a_readable_unified_diff(gdp: Transcript) -> None:
    a = gdp.messages[1]
    revision = gdp.apply([Replace(a.id, "About 28 billion USD.")])
    diff = gdp.diff(revision.parent, revision.number)
    assert [(d.id, d.status) for d in diff.messages] == [(a.id, "changed")]
    assert diff.changed[0].before.content == "About 504 billion USD."
    text = str(diff)
    assert "-About 504 billion USD." in text and "+About 28 billion USD." in text
    assert f"--- revision {revision.parent}" in text
    assert not gdp.diff(2, 2) and "no changes" in str(gdp.diff(2, 2))
    appended = gdp.diff(0, 1)
    assert [d.status for d in appended.messages] == ["added", "added"]


def test_diff_shows_a_reordering_and_a_change_of_metadata_alone() -> None:
    t = Transcript("order")
    t.append(user="q1", assistant="a1")
    t.append(user="q2", assistant="a2")
    m = t.messages
    t.set([m[2], m[3], m[0], m[1]])  # the second exchange first
    moved = t.diff(2, 3)
    assert moved and {d.status for d in moved.messages} == {"moved"} and moved.moved == moved.messages
    assert {d.id for d in moved.messages} in ({m[0].id, m[1].id}, {m[2].id, m[3].id})  # one exchange moved
    assert ": moved @@" in str(moved)
    m = t.messages
    t.set([Message(m[0].id, m[0].role, m[0].content, metadata={"pinned": True}), *m[1:]])
    pinned = t.diff(3, 4)
    assert [(d.id, d.status) for d in pinned.messages] == [(m[0].id, "changed")]
    assert "content parts or metadata changed" in str(pinned)
    assert not t.diff(4, 4)


def test_diff_lists_a_removed_message_where_it_stood() -> None:
    """A removal comes where the message stood (before what was added in its place, as in a
    unified diff), not after every other change."""
    t = Transcript("trip")
    t.append(user="Plan a trip to Ireland", assistant="Ireland: Dublin, Galway.")
    t.append(user="Budget?", assistant="About 900 EUR.")
    t.append(user="Best month?", assistant="June.")
    t.append(user="Visa?", assistant="None needed.")
    m = t.messages
    revision = t.apply([Delete(m[0].id), Delete(m[1].id), Replace(m[5].id, "July."),
                        InsertAfter(m[5].id, "user", "And car hire?"), Delete(m[6].id), Delete(m[7].id)])
    diff = t.diff(revision.parent, revision.number)
    assert [(d.status, (d.before or d.after).content) for d in diff.messages] == [
        ("removed", "Plan a trip to Ireland"), ("removed", "Ireland: Dublin, Galway."),  # no kept message before them
        ("changed", "June."), ("removed", "Visa?"), ("removed", "None needed."), ("added", "And car hire?"),
    ]
    hunks = [line for line in str(diff).splitlines() if line.startswith("@@")]
    assert hunks == ["@@ user #1: removed @@", "@@ assistant #2: removed @@", "@@ assistant #4: changed @@",
                     "@@ user #7: removed @@", "@@ assistant #8: removed @@", "@@ user #5: added @@"]

def test_snapshot_and_history(gdp: Transcript) -> None:
    gdp.apply([Delete(gdp.messages[3].id)])
    assert len(gdp.snapshot(2)) == 4 and len(gdp.snapshot(3)) == 3 and gdp.snapshot(0) == ()
    history = gdp.history()
    assert [(r.number, r.parent, r.kind) for r in history] == [(1, 0, "append"), (2, 1, "append"), (3, 2, "apply")]
    assert all(r.time > 0 for r in history)


def test_set_and_clear_are_revisions_and_the_record_survives(gdp: Transcript) -> None:
    kept = gdp.messages[2]
    gdp.set([kept, {"role": "assistant", "content": "A brand new answer."}])
    assert contents(gdp) == ["What were its largest categories?", "A brand new answer."]
    assert gdp.messages[0].id == kept.id
    assert "A brand new answer." in [m.content for m in gdp.record()]
    gdp.clear()
    assert gdp.messages == () and gdp.history()[-1].kind == "clear"
    assert len(gdp.record()) == 5
    gdp.undo()
    assert contents(gdp) == ["What were its largest categories?", "A brand new answer."]


def test_set_computes_provenance_and_ignores_the_callers(gdp: Transcript) -> None:
    """A kept message set() rewrites is 'edited' as apply(Replace) makes it; one it keeps as
    it is keeps its provenance; a new one is 'original'.  Provenance given with the messages
    (origin, derived_from, revision) is never taken."""
    q, a, q2, a2 = gdp.messages
    bogus = {"origin": "edited", "derived_from": ("never-existed",), "revision": 99}
    revision = gdp.set([
        replace(q, **bogus),  # kept as it is: the held version, whatever it claims
        replace(a, content="Iceland: about 25 billion USD.", origin="inserted", derived_from=()),
        replace(q2, metadata={"pinned": True}),  # metadata alone changed
        Message("new1", "assistant", "A new answer.", **bogus),
        {"role": "user", "content": "Also new.", "origin": "inserted", "derived_from": ["nope"]},
    ])
    now = gdp.messages
    assert now[0] == q  # provenance and revision kept
    assert (now[1].origin, now[1].derived_from, now[1].revision) == ("edited", (a.id,), revision.number)
    assert (now[2].origin, now[2].derived_from, dict(now[2].metadata)) == ("edited", (q2.id,), {"pinned": True})
    assert [(m.origin, m.derived_from, m.revision) for m in now[3:]] == [("original", (), revision.number)] * 2
    assert [m.content for m in gdp.record()][1] == "About 504 billion USD."  # the record keeps what was said
    assert [m.id for m in gdp.record()][-2:] == [now[3].id, now[4].id]  # new messages join the record
    again = gdp.set([*gdp.messages[:1], replace(gdp.messages[1], content="Iceland: 25 billion.")])
    assert gdp.messages[1].derived_from == (a.id,) and again.kind == "set"  # still derived from the original
    inserted = gdp.apply([InsertAfter(None, "user", "Inserted.")]).added[0]
    gdp.set([replace(inserted, content="Inserted, then set."), *gdp.messages[1:]])
    assert (gdp.messages[0].origin, gdp.messages[0].derived_from) == ("inserted", ())  # an insertion stays one
    head = gdp.head
    gdp.set(gdp.messages)  # the current state again: nothing recorded
    assert gdp.head == head
    gdp.undo()
    assert gdp.messages[0].content == "Inserted." and gdp.messages[0].origin == "inserted"


def test_purge_forgets_everything() -> None:
    store = InMemoryStore()
    t = Transcript("private", store=store)
    t.append(user="my secret", assistant="noted")
    other = Transcript("other", store=store)
    other.append(user="keep me", assistant="ok")
    t.purge()
    assert t.messages == () and t.record() == [] and t.history() == [] and t.head == 0
    assert Transcript("private", store=store).record() == []
    assert contents(Transcript("other", store=store)) == ["keep me", "ok"]


def test_errors_are_clear_and_change_nothing(gdp: Transcript) -> None:
    head = gdp.head
    with pytest.raises(UnknownMessageError, match="transcript.messages"):
        gdp.apply([Replace(gdp.messages[0].id, "ok"), Replace("nope", "x")])
    with pytest.raises(InvalidInputError):
        gdp.apply([Replace(gdp.messages[0].id, "   ")])
    with pytest.raises(InvalidInputError):
        gdp.append()
    with pytest.raises(InvalidInputError):
        gdp.append(user="  ")
    with pytest.raises(TypeError):
        gdp.apply(["not a request"])  # type: ignore[list-item]
    assert gdp.head == head
    with pytest.raises(InvalidInputError):
        Transcript("")


@pytest.mark.parametrize(
    "call",
    [
        lambda t: Transcript(5),
        lambda t: Transcript(None),
        lambda t: t.revert("1"),
        lambda t: t.revert(True),
        lambda t: t.snapshot(1.0),
        lambda t: t.diff(None),
        lambda t: t.diff(0, "2"),
        lambda t: t.append("q", "a", messages=None),
        lambda t: t.append(messages={"role": "user", "content": "one dict"}),
        lambda t: t.append(messages=["text"]),
        lambda t: t.set(None),
        lambda t: t.set(Message("m", "user", "one message")),
        lambda t: asyncio.run(t.aappend(messages=None)),
        lambda t: asyncio.run(t.aset(None)),
    ],
    ids=["session-int", "session-none", "revert-str", "revert-bool", "snapshot-float", "diff-none", "diff-str",
         "append-none", "append-one-dict", "append-str-item", "set-none", "set-one-message", "aappend-none",
         "aset-none"],
)
def test_wrong_argument_types_are_type_errors_that_say_what_to_pass(gdp: Transcript, call) -> None:
    head, state = gdp.head, gdp.messages
    with pytest.raises(InvalidTypeError, match="pass") as caught:
        call(gdp)
    assert isinstance(caught.value, TypeError) and not isinstance(caught.value, ValueError)
    assert (gdp.head, gdp.messages) == (head, state)


def test_right_types_with_bad_values_stay_value_errors(gdp: Transcript) -> None:
    with pytest.raises(InvalidInputError, match="non-empty"):
        Transcript("")
    for call in (lambda: gdp.revert(-1), lambda: gdp.snapshot(99), lambda: gdp.diff(0, 3)):
        with pytest.raises(HistoryError, match=r"run 0\.\.2"):
            call()


def test_open_user_message_is_completed_in_place_despite_other_writers() -> None:
    store = InMemoryStore()
    alice, bob = Transcript("shared", store=store), Transcript("shared", store=store)
    alice.append(user="Alice asks")
    bob.append(user="Bob asks")
    bob.append(assistant="answer to Bob")
    alice.append(assistant="answer to Alice")
    assert contents(Transcript("shared", store=store)) == ["Alice asks", "answer to Alice", "Bob asks", "answer to Bob"]


QUESTION, OTHER_TURN = "What is 2+2?", ["unrelated question from another tab", "unrelated answer"]


@pytest.fixture
def asked(tmp_path):
    """This object's open question, then a turn another object appended after it (one SQLite file)."""
    path = tmp_path / "c.db"
    with Transcript("s", store=path) as mine, Transcript("s", store=path) as other:
        mine.append(user="q1", assistant="a1")
        mine.append(user=QUESTION)
        other.append(user=OTHER_TURN[0], assistant=OTHER_TURN[1])
        yield mine


def refused(t: Transcript) -> None:
    head = t.head
    with pytest.raises(InvalidInputError, match="cannot be stored"):
        t.set([*t.messages, {"role": "user", "content": "x", "metadata": {"bad": object()}}])
    assert t.head == head


def edit_of_an_earlier_message(t: Transcript) -> None:
    t.set([replace(t.messages[0], content="q1, reworded"), *t.messages[1:]])


@pytest.mark.parametrize("call", [refused, lambda t: t.set(t.messages), lambda t: asyncio.run(t.aset(t.messages)),
                                  edit_of_an_earlier_message],
                         ids=["refused", "no-op", "async no-op", "kept in place"])
def test_a_set_that_leaves_the_open_question_where_it_is_keeps_it_open(call, asked: Transcript) -> None:
    call(asked)
    asked.append(assistant="4")
    assert contents(asked)[2:] == [QUESTION, "4", *OTHER_TURN]


@pytest.mark.parametrize("call", [
    lambda t: t.set([m for m in t.messages if m.content != QUESTION]),
    lambda t: t.set([*t.messages[:3], {"role": "assistant", "content": "answered by the set"}, *t.messages[3:]]),
    lambda t: t.clear(),
    lambda t: asyncio.run(t.aclear()),
], ids=["set without it", "set answering it", "clear", "aclear"])
def test_a_set_or_clear_that_takes_the_open_question_out_or_answers_it_forgets_it(call, asked: Transcript) -> None:
    call(asked)
    asked.append(assistant="4")
    assert contents(asked)[-1] == "4"  # at the end, as any append: no question to answer


def test_stale_proposal_is_rejected_and_appends_are_rebased(gdp: Transcript) -> None:
    target = gdp.messages[0]
    other = Transcript("gdp", store=gdp.store)

    def proposal(content: str, base: int) -> Proposal:
        old = gdp.snapshot(base)[0]
        return Proposal("gdp", base, (Change(old, old.revised(content, 0)),), gdp.diff(base, base), "fix", "m", "patch")

    base = gdp.head
    other.append(user="Meanwhile...", assistant="...another turn.")  # an append: the proposal rebases
    committed = gdp.commit(proposal("Iceland?", base))
    assert committed.base == base and committed.parent == base + 1
    assert contents(gdp)[0] == "Iceland?" and contents(gdp)[-1] == "...another turn."
    stale_base = gdp.head
    other.apply([Replace(target.id, "someone else's edit")])
    before = (gdp.head, contents(gdp))
    with pytest.raises(StaleHeadError, match="nothing was written"):
        gdp.commit(proposal("mine", stale_base))
    assert (gdp.head, contents(gdp)) == before


def test_reopening_a_sqlite_file_restores_state_history_and_record(tmp_path) -> None:
    path = tmp_path / "chats.db"
    t = Transcript("s1", store=SQLiteStore(path))
    t.append(user="Café ☕ — “quotes” and 'apostrophes'; DROP TABLE x;", assistant="```py\nprint(1)\n```")
    t.apply([Replace(t.messages[1].id, "```py\nprint(2)\n```")])
    t.append(messages=[Message("tool-1", "tool", "42", metadata={"tool_call_id": "c1"})])
    again = Transcript("s1", store=str(path))
    assert again.messages == t.messages
    assert again.history() == t.history()
    assert again.record() == t.record()
    again.undo()
    assert t.messages[1].content == "```py\nprint(1)\n```"  # the other object sees it (head check)


def test_threads_can_share_a_transcript() -> None:
    t = Transcript("threads")

    def work(name: str) -> None:
        for i in range(25):
            t.append(user=f"{name} q{i}", assistant=f"{name} a{i}")

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    texts = contents(t)
    assert len(texts) == 200 and t.head == 100
    for n in range(4):
        mine = [x for x in texts if x.startswith(f"w{n} ")]
        assert mine == [f"w{n} {k}{i}" for i in range(25) for k in ("q", "a")]


def test_async_twins() -> None:
    async def main() -> None:
        t = Transcript("async")
        await asyncio.gather(*(t.aappend(user=f"q{i}", assistant=f"a{i}") for i in range(5)))
        assert len(await t.aget_messages()) == 10
        first = (await t.aget_messages())[0]
        await t.aapply([Replace(first.id, "changed")])
        await t.aundo()
        await t.aredo()
        assert (await t.aget_messages())[0].content == "changed"
        revert = await t.arevert(1)
        assert len(revert.removed) == 8
        assert [r.kind for r in await t.ahistory()][-1] == "revert"
        assert len(await t.arecord()) == 10
        assert (await t.adiff(0, 1)).added
        await t.aset([{"role": "user", "content": "fresh"}])
        await t.aclear()
        await t.apurge()
        assert t.head == 0

    asyncio.run(main())


def test_an_id_is_never_reused(gdp: Transcript) -> None:
    taken = gdp.messages[0]
    head = gdp.head
    with pytest.raises(InvalidInputError, match="never reused"):
        gdp.append(messages=[Message(taken.id, "user", "again")])
    with pytest.raises(InvalidInputError):
        gdp.append(messages=[Message("x1", "user", "a"), Message("x1", "assistant", "b")])
    gdp.apply([Delete(taken.id)])
    with pytest.raises(InvalidInputError):  # deleted ids stay taken: undo must be able to restore them
        gdp.append(messages=[Message(taken.id, "user", "again")])
    assert gdp.head == head + 1 and len(gdp.messages) == 3


def test_a_session_purged_and_rewritten_elsewhere_is_reloaded(tmp_path) -> None:
    path = tmp_path / "shared.db"
    a, b = Transcript("s", store=SQLiteStore(path)), Transcript("s", store=SQLiteStore(path))
    a.append(user="old q", assistant="old a")
    b.purge()
    b.append(user="new q1", assistant="new a1")
    b.append(user="new q2", assistant="new a2")
    assert contents(a) == ["new q1", "new a1", "new q2", "new a2"]
    assert len(a.history()) == 2 and [m.content for m in a.record()][0] == "new q1"


def test_renew_taken_ids_gives_re_sent_messages_fresh_ids(gdp: Transcript) -> None:
    taken = gdp.messages[0]
    gdp.append(messages=[Message(taken.id, "user", "again"), Message("z1", "assistant", "a"),
                         Message("z1", "assistant", "b")], renew_taken_ids=True)
    ids = [m.id for m in gdp.messages]
    assert len(set(ids)) == len(ids) == 7 and ids.count(taken.id) == 1 and "z1" in ids


def test_the_internal_snapshot_is_the_version_and_state_read_together() -> None:
    """``Transcript._snapshot`` (for followers inside the library, such as a gate that
    copies only the messages it hands out): the version and the state of one read, the
    state as ``messages`` gives it, the transcript's own messages rather than copies."""
    writer = Transcript("snap")
    writer.append(user="What was Ireland's GDP in 2021?", assistant="About 500 billion USD.")
    reader = Transcript("snap", store=writer.store)
    writer.append(user="And in 2022?", assistant="About 530 billion USD.")  # read by the snapshot's refresh
    version, state = reader._snapshot()
    assert version == reader.version == writer.version == (2, writer.version[1])
    assert state == reader.messages and isinstance(state, tuple)
    again = reader._snapshot()[1]
    assert all(a is b for a, b in zip(state, again))  # not copied: the reader's own messages
    assert all(a is not b for a, b in zip(state, reader.messages))  # messages still hands out copies
    assert Transcript("empty")._snapshot() == ((0, 0.0), ())


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_a_proposal_from_before_the_session_was_purged_and_written_anew_is_refused(where, tmp_path) -> None:
    from context_gatekeeper import StaleHeadError
    from context_gatekeeper.testing import ScriptedModel

    store = InMemoryStore() if where == "memory" else str(tmp_path / "s.db")
    mine = Transcript("chat", store=store)
    mine.append(user="Plan my trip to Iceland", assistant="Sure: Reykjavik, then the Golden Circle.")
    insert = {"operations": [{"op": "insert_after", "id": "2", "role": "user",  # the prompt numbers messages
                              "content": "My passport number is X1234567."}]}
    proposal = mine.edit("add my passport number", model=ScriptedModel([insert]), preview=True)
    theirs = Transcript("chat", store=mine.store)  # another worker: the user starts over
    theirs.purge()
    theirs.append(user="Hi, I'm Bob", assistant="Hello Bob!")
    before = [(r.number, r.kind, r.time) for r in Transcript("chat", store=mine.store).history()]
    with pytest.raises(StaleHeadError, match="compute the edit again"):
        mine.commit(proposal)
    assert [(r.number, r.kind, r.time) for r in Transcript("chat", store=mine.store).history()] == before  # nothing written
    assert contents(Transcript("chat", store=mine.store)) == contents(mine) == ["Hi, I'm Bob", "Hello Bob!"]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_undo_then_redo_puts_an_inserted_message_back_where_it_stood(store: str, tmp_path: Path) -> None:
    """A note inserted after an open question, then the answer (which joins its question, before
    the note): undo and redo give back that state, the answer still next to its question (the
    redo put the note back right after the question, where it was first put)."""
    from context_gatekeeper import InsertAfter, SQLiteStore

    t = Transcript("s", store=SQLiteStore(tmp_path / "t.db") if store == "sqlite" else None)
    t.append(user="Where did we go?")
    question = t.messages[-1].id
    t.apply([InsertAfter(question, "user", "(note inserted after the question)")])
    t.append(assistant="Iceland, in 2022.")
    before = [m.content for m in t.messages]
    assert before == ["Where did we go?", "Iceland, in 2022.", "(note inserted after the question)"]
    t.undo()
    assert [m.content for m in t.messages] == before[:2]
    t.redo()
    assert [m.content for m in t.messages] == before
    t.undo()  # the redone revision, undone again
    t.redo()
    assert [m.content for m in t.messages] == before


def test_an_undo_the_store_refuses_leaves_this_objects_state_as_the_stores() -> None:
    """undo works out its anchors on the state it holds and takes them back: exactly, even for a
    message a redo stamped anew, so a refused commit leaves what a fresh reader sees."""
    from context_gatekeeper import Replace

    store = InMemoryStore()
    t = Transcript("s", store=store)
    t.append(user="We went to Ireland in 2021.", assistant="Nice, Ireland!")
    t.append(user="What next?", assistant="Iceland?")
    t.apply([Replace(t.messages[0].id, "We went to Iceland in 2022.")])
    t.undo()
    t.redo()  # the message is stamped by the redo now
    other = Transcript("s", store=store)
    commit = store.commit

    def another_writer_first(*args, **kwargs):
        store.commit = commit
        other.apply([Replace(other.messages[3].id, "Iceland!")])
        return commit(*args, **kwargs)

    store.commit = another_writer_first
    with pytest.raises(StaleHeadError):
        t.undo()
    fresh = Transcript("s", store=store)
    assert [(m.content, m.revision) for m in t.messages] == [(m.content, m.revision) for m in fresh.messages]


def test_messages_is_a_list_even_for_one_message(gdp: Transcript) -> None:
    """One dict (or one Message) where a list is expected is named as what it is."""
    head = gdp.head
    for call in (lambda: gdp.append(messages={"role": "user", "content": "hi"}),
                 lambda: gdp.set({"role": "user", "content": "hi"})):
        with pytest.raises(InvalidTypeError, match=r"messages must be a list, got one dict; .*messages=\[\.\.\.\]"):
            call()
    with pytest.raises(InvalidTypeError, match="messages must be a list, got one Message"):
        gdp.append(messages=Message("m", "user", "hi"))
    assert gdp.head == head


@pytest.mark.parametrize("how", ["append", "set", "aappend", "aset"])
def test_a_message_dict_with_a_key_a_message_does_not_have_is_refused(how: str, tmp_path) -> None:
    """A tool result in the OpenAI / LangChain dict shape (``tool_call_id`` beside ``content``)
    or a typo (``metdata``) would lose what the key carries without a word: refused, naming the
    key and where such data goes, and nothing is written."""
    store = SQLiteStore(tmp_path / "t.db")
    try:
        t = Transcript("s", store=store)
        t.append(user="What is 6*7?")
        head, state, record = t.head, t.messages, t.record()
        call = [{"role": "assistant", "content": "", "metadata": {"tool_calls": [{"id": "call_1", "name": "calc"}]}}]
        for bad, key in (({"role": "tool", "content": "42", "tool_call_id": "call_1"}, "'tool_call_id'"),
                         ({"role": "tool", "content": "42", "metdata": {"tool_call_id": "call_1"}}, "'metdata'")):
            messages = [*call, bad]
            if how == "set":
                messages = [*state, *messages]
            method = getattr(t, how)
            with pytest.raises(InvalidInputError, match=f"{key} that a Message does not have.*metadata"):
                result = method(messages) if how.endswith("set") else method(messages=messages)
                if how.startswith("a"):
                    asyncio.run(result)
            assert (t.head, t.messages, t.record()) == (head, state, record)
            assert store.head("s") == head
        # what the error says to do: the tool-call fields in metadata, where the pairing checks read them
        t.append(messages=[*call, {"role": "tool", "content": "42", "metadata": {"tool_call_id": "call_1"}}])
        assert t.messages[-1].metadata == {"tool_call_id": "call_1"}
        # every key Message.to_dict writes is one it takes back
        again = Transcript("copy")
        again.set([m.to_dict() for m in t.messages])
        def said(m: Message) -> tuple:
            return m.id, m.role, m.content, m.parts, m.metadata

        assert [said(m) for m in again.messages] == [said(m) for m in t.messages]
    finally:
        store.close()


# -- an open question answered meanwhile -----------------------------------------------------------
def _answer_it_by_edit(t: Transcript, question: str) -> None:
    from context_gatekeeper.testing import ScriptedModel

    t.edit("Iceland, not Ireland", model=ScriptedModel([
        '{"operations": [{"op": "replace", "id": "1", "content": "Iceland GDP?"},'
        '{"op": "replace", "id": "2", "content": "Iceland: 25bn"},'
        '{"op": "insert_after", "id": "3", "role": "assistant", "content": "Reykjavik."}]}']))


def _answer_it_by_apply_undo_redo(t: Transcript, question: str) -> None:
    t.apply([InsertAfter(question, "assistant", "Reykjavik.")])
    t.undo()
    t.redo()


@pytest.mark.parametrize("answer_it", [
    _answer_it_by_edit,
    lambda t, question: t.apply([InsertAfter(question, "assistant", "Reykjavik.")]),
    _answer_it_by_apply_undo_redo,
    lambda t, question: Transcript("s", store=t.store).append(assistant="Reykjavik."),  # another writer
], ids=["edit", "apply", "undo-redo", "another-writer"])
def test_an_answer_whose_open_question_was_answered_meanwhile_is_refused_not_put_second(answer_it, tmp_path) -> None:
    """An edit (or apply) put an assistant message right after this object's open question; the
    pending answer then landed between the two: two assistant messages in a row."""
    from context_gatekeeper.errors import InvalidRevisionError

    with Transcript("s", store=SQLiteStore(tmp_path / "t.db")) as t:
        t.append(user="Ireland GDP?", assistant="Ireland: 500bn")
        t.append(user="And the capital?")
        question = t.messages[-1].id
        answer_it(t, question)
        head, state = t.head, t.messages
        with pytest.raises(InvalidRevisionError, match=r"answered meanwhile by revision \d+ \(\w+\).*append\(user="):
            t.append(assistant="Dublin is the capital.")
        assert (t.head, t.messages) == (head, state)  # nothing written
        roles = [m.role for m in t.messages]
        assert all(a != b for a, b in zip(roles, roles[1:]))
        t.append(user="And its population?", assistant="About 390,000.")  # the question is forgotten: appends work
        assert [m.content for m in t.messages][-2:] == ["And its population?", "About 390,000."]


def test_a_note_or_another_turn_after_the_open_question_leaves_it_open(tmp_path) -> None:
    """What follows the question without answering it (a user message first) is no answer: the
    pending answer still goes right after its question."""
    with Transcript("s", store=SQLiteStore(tmp_path / "t.db")) as t:
        t.append(user="Where did we go?")
        question = t.messages[-1].id
        Transcript("s", store=t.store).append(user="another tab", assistant="its answer")
        t.apply([InsertAfter(question, "user", "(a note)")])
        t.append(assistant="Iceland.")
        assert contents(t) == ["Where did we go?", "Iceland.", "(a note)", "another tab", "its answer"]


# -- a retried answer is a retry, not a second answer -----------------------------------------------
def test_an_answer_retried_after_its_reply_was_lost_is_skipped_not_refused(tmp_path) -> None:
    """The answer's first write landed but its reply was lost; the retry (same ids) finds its own
    first copy after the question: a retried request (a no-op), not a second answer."""
    with Transcript("s", store=LostReplyStore(tmp_path / "t.db")) as t:
        t.append(user="What is 6*7?")
        call = Message("call", "assistant", "", metadata={"tool_calls": [{"id": "c1", "name": "calc"}]})
        result = Message("result", "tool", "42", metadata={"tool_call_id": "c1"})
        t.store.lose_next = True
        with pytest.raises(ConnectionError):
            t.append(messages=[call])
        head = t.head
        retried = t.append(messages=[call])  # what Transcript.append promises: skipped
        assert (retried.changes, retried.number, t.head) == ((), head, head)
        t.append(messages=[result])  # the question is answered: what comes next goes after the answer
        assert [m.id for m in t.messages][1:] == ["call", "result"]
        # a retry of the answer with a new message after it: only the new one is put, after the stored copy
        t.append(user="And 7*8?")
        answer, more = Message("a2", "assistant", "56."), Message("a3", "assistant", "Anything else?")
        t.store.lose_next = True
        with pytest.raises(ConnectionError):
            t.append(messages=[answer])
        t.append(messages=[answer, more])
        assert contents(t)[-3:] == ["And 7*8?", "56.", "Anything else?"]
        # a different answer to a question answered meanwhile is still refused
        from context_gatekeeper.errors import InvalidRevisionError

        t.append(user="And 8*9?")
        Transcript("s", store=t.store).append(assistant="72.")
        with pytest.raises(InvalidRevisionError, match="answered meanwhile"):
            t.append(messages=[Message("a4", "assistant", "Seventy-two.")])
        assert contents(t)[-2:] == ["And 8*9?", "72."]


def test_an_earlier_answer_given_again_is_no_retry_of_a_question_answered_meanwhile(tmp_path) -> None:
    """An answer-only append [x, z] to the open question Q2, where x is the stored answer to Q1 and
    another writer answered Q2 meanwhile: x is no first copy of this answer (it does not follow
    Q2), so z would be a second answer: refused, nothing written, not put after x inside turn 1."""
    from context_gatekeeper.errors import InvalidRevisionError

    with Transcript("s", store=SQLiteStore(tmp_path / "t.db")) as t:
        t.append(user="Q1?")
        x = Message("x", "assistant", "A1.")
        t.append(messages=[x])
        t.append(user="Q2?")
        Transcript("s", store=t.store).append(assistant="Y, another writer's answer to Q2.")
        head, state = t.head, t.messages
        with pytest.raises(InvalidRevisionError, match=r"answered meanwhile by revision \d+ \(append\)"):
            t.append(messages=[x, Message("z", "assistant", "Z, my answer to Q2.")])
        assert (t.head, t.messages) == (head, state)
        assert contents(t) == ["Q1?", "A1.", "Q2?", "Y, another writer's answer to Q2."]
        t.append(user="Q3?", assistant="A3.")  # the question is forgotten: appends work
        assert contents(t)[-2:] == ["Q3?", "A3."]


def test_an_earlier_answer_given_again_leaves_the_new_answer_right_after_its_question(tmp_path) -> None:
    """[x, z] to the open, unanswered Q2, where x is the stored answer to Q1: x is skipped as a
    retry, and z answers Q2 (right after it), not turn 1 (after x's stored copy)."""
    with Transcript("s", store=SQLiteStore(tmp_path / "t.db")) as t:
        t.append(user="Q1?")
        x = Message("x", "assistant", "A1.")
        t.append(messages=[x])
        t.append(user="Q2?")
        revision = t.append(messages=[x, Message("z", "assistant", "Z, my answer to Q2.")])
        assert [m.id for m in revision.added] == ["z"]
        assert contents(t) == ["Q1?", "A1.", "Q2?", "Z, my answer to Q2."]
        t.append(user="Q3?", assistant="A3.")  # the question was answered: appends go at the end
        assert contents(t)[-2:] == ["Q3?", "A3."]
        with Transcript("s", store=SQLiteStore(tmp_path / "t.db")) as again:
            assert contents(again) == contents(t)


def test_two_writers_retrying_one_answer_store_it_once(tmp_path) -> None:
    """Two writers deliver the same answer (one request, retried by a second worker): the one that
    comes second finds it stored and skips it, whoever's open question it answers."""
    path = tmp_path / "t.db"
    with Transcript("s", store=SQLiteStore(path)) as first, Transcript("s", store=SQLiteStore(path)) as second:
        first.append(user="Capital of Iceland?")
        answer = Message("a1", "assistant", "Reykjavik.")
        second.append(messages=[answer])
        revision = first.append(messages=[answer])
        assert revision.changes == ()
        assert [(m.role, m.content) for m in first.messages] == [
            ("user", "Capital of Iceland?"), ("assistant", "Reykjavik.")]
        first.append(user="And its population?", assistant="About 140,000.")
        assert contents(second) == ["Capital of Iceland?", "Reykjavik.", "And its population?", "About 140,000."]


# -- a held message behind a new one: a repeat of an earlier turn, not a retry -------------------
def test_an_earlier_answer_behind_a_new_question_is_stored_under_a_fresh_id_when_renewing() -> None:
    """With renew_taken_ids, [new question, x] where x answers an earlier, already-answered turn
    (an LLM cache's answer to a question asked again) stores both, x under a fresh id: it is no
    retry of this append, which the end of the state does not repeat."""
    t = Transcript("s")
    x = Message("x", "assistant", "A1.")
    t.append(messages=[Message("q1", "user", "Q1?"), x], renew_taken_ids=True)
    t.append(messages=[Message("q2", "user", "Q2?"), Message("y", "assistant", "A2.")], renew_taken_ids=True)
    again = t.append(messages=[Message("q1-again", "user", "Q1?"), x], renew_taken_ids=True)
    assert contents(t) == ["Q1?", "A1.", "Q2?", "A2.", "Q1?", "A1."]
    ids = [m.id for m in t.messages]
    assert ids[:5] == ["q1", "x", "q2", "y", "q1-again"] and ids[5] not in ids[:5]
    assert [c.after for c in again.changes][1:] == ["q1-again"]
    # the same batch again: its messages end the state (the question by text, x as its renewed copy)
    head = t.head
    retried = t.append(messages=[Message("q1-third", "user", "Q1?"), x], renew_taken_ids=True)
    assert (retried.changes, t.head) == ((), head)
    # a prefix of it ends the state: only what follows the prefix is put, after it
    t.append(messages=[Message("q1-fourth", "user", "Q1?"), x, Message("more", "assistant", "More.")],
             renew_taken_ids=True)
    assert contents(t) == ["Q1?", "A1.", "Q2?", "A2.", "Q1?", "A1.", "More."]
    # x given twice behind a new message: both copies stored, neither under x
    added = t.append(messages=[Message("q3", "user", "Q3?"), x, x], renew_taken_ids=True).added
    assert [m.content for m in added] == ["Q3?", "A1.", "A1."] and "x" not in [m.id for m in added]


def test_a_held_message_leading_an_append_is_still_a_retry_when_renewing() -> None:
    """The rule above leaves a retried request alone: held messages that lead the append."""
    t = Transcript("s")
    t.append(messages=[Message("q1", "user", "yes"), Message("a1", "assistant", "first")], renew_taken_ids=True)
    t.append(messages=[Message("q2", "user", "and?"), Message("a2", "assistant", "second")], renew_taken_ids=True)
    t.append(messages=[Message("q1", "user", "yes"), Message("a3", "assistant", "third")], renew_taken_ids=True)
    assert [m.id for m in t.messages] == ["q1", "a1", "q2", "a2", "a3"]


def test_apply_with_keep_tool_pairs_refuses_a_split_and_leaves_one_the_state_holds() -> None:
    t = Transcript("tools")
    call = Message("call", "assistant", "", metadata={"tool_calls": [{"id": "c1", "name": "calc"}]})
    t.append(messages=[Message("q", "user", "6*7?"), call, Message("r", "tool", "42", metadata={"tool_call_id": "c1"}),
                       Message("a", "assistant", "42.")])
    head = t.head
    with pytest.raises(InvalidInputError, match="'c1' of message 'call' would be separated"):
        t.apply([InsertAfter("call", "user", "note")], keep_tool_pairs=True)
    with pytest.raises(InvalidInputError, match="would lose the assistant message"):
        asyncio.run(t.aapply([Delete("call")], keep_tool_pairs=True))
    assert t.head == head
    t.apply([Delete("r")])  # the core's default allows it, as before
    t.apply([Replace("a", "Forty-two.")], keep_tool_pairs=True)  # a split the state holds already does not count
    assert contents(t) == ["6*7?", "", "Forty-two."]


# -- an earlier turn's message answering the open question: renewed, placed after it -------------
def _cached_answer_setup(t: Transcript) -> Message:
    """Q1 answered by x, Q2 answered, then Q3 appended alone (left open); returns x."""
    x = Message("x", "assistant", "A1.")
    t.append(messages=[Message("q1", "user", "Q1?"), x], renew_taken_ids=True)
    t.append(messages=[Message("q2", "user", "Q2?"), Message("y", "assistant", "A2.")], renew_taken_ids=True)
    t.append(messages=[Message("q3", "user", "Q3?")], renew_taken_ids=True)
    return x


def test_an_earlier_answer_alone_answers_the_open_question_under_a_fresh_id_when_renewing(tmp_path) -> None:
    """LangChain's one-at-a-time flow: the question is stored first, then the LLM cache's answer
    (the earlier AIMessage, id and all) arrives alone.  With renew_taken_ids it answers the open
    question under a fresh id; the same answer sent again (its reply lost) is a retry of that
    write, not a second answer."""
    with Transcript("s", store=LostReplyStore(tmp_path / "t.db")) as t:
        x = _cached_answer_setup(t)
        t.store.lose_next = True
        with pytest.raises(ConnectionError):
            t.append(messages=[x], renew_taken_ids=True)
        assert contents(t) == ["Q1?", "A1.", "Q2?", "A2.", "Q3?", "A1."]
        ids = [m.id for m in t.messages]
        assert ids[:5] == ["q1", "x", "q2", "y", "q3"] and ids[5] not in ids[:5]
        head = t.head
        retried = t.append(messages=[x], renew_taken_ids=True)  # the lost reply's retry
        assert (retried.changes, t.head) == ((), head)
        t.append(messages=[x], renew_taken_ids=True)  # no open question now: a retry of x, at the end
        assert t.head == head
        t.append(user="Q4?", assistant="A4.")  # the question was answered: appends go at the end
        assert contents(t)[-2:] == ["Q4?", "A4."]


def test_an_earlier_answer_alone_to_the_open_question_stays_a_retry_without_renewing() -> None:
    """Without renew_taken_ids (LlamaIndex's path) a held message is a retry wherever it is
    stored: skipped, and the question stays open for the answer that follows."""
    t = Transcript("s")
    x = _cached_answer_setup(t)
    head = t.head
    assert t.append(messages=[x]).changes == () and t.head == head
    t.append(assistant="A3.")
    assert contents(t) == ["Q1?", "A1.", "Q2?", "A2.", "Q3?", "A3."]


def test_an_earlier_tool_call_answering_the_open_question_keeps_its_results_with_it() -> None:
    """An agent's output [earlier tool call (held), its new result, the final answer] to the open
    question: the call is renewed and placed after the question, its result follows it (no
    orphan tool result); the whole batch again is a retry."""
    from context_gatekeeper.editing.checks import tool_violations

    t = Transcript("s")
    call = Message("run-1", "assistant", "", metadata={"tool_calls": [{"id": "c1", "name": "weather"}]})
    t.append(messages=[Message("q1", "user", "Weather in Dublin?"), call,
                       Message("t1", "tool", "rain", metadata={"tool_call_id": "c1"}),
                       Message("run-2", "assistant", "Rainy.")], renew_taken_ids=True)
    t.append(messages=[Message("q2", "user", "And now?")], renew_taken_ids=True)
    batch = [call, Message("t2", "tool", "sun", metadata={"tool_call_id": "c1"}),
             Message("run-3", "assistant", "Sunny.")]
    revision = t.append(messages=batch, renew_taken_ids=True)
    assert contents(t) == ["Weather in Dublin?", "", "rain", "Rainy.", "And now?", "", "sun", "Sunny."]
    renewed = t.messages[5]
    assert renewed.id != "run-1" and renewed.metadata == call.metadata
    assert [c.after for c in revision.changes] == ["q2", renewed.id, "t2"]
    assert tool_violations(list(t.messages)) == []
    head = t.head
    assert t.append(messages=batch, renew_taken_ids=True).changes == () and t.head == head


def test_an_id_given_twice_in_an_answer_to_the_open_question_is_renewed_after_it() -> None:
    """[x (an earlier answer), x with new text] to the open question: both answer it, in order,
    under fresh ids; neither goes after x's stored copy in the middle of the history."""
    t = Transcript("s")
    x = _cached_answer_setup(t)
    added = t.append(messages=[x, Message("x", "assistant", "A3, the new answer.")], renew_taken_ids=True).added
    assert contents(t) == ["Q1?", "A1.", "Q2?", "A2.", "Q3?", "A1.", "A3, the new answer."]
    assert [m.id for m in t.messages][:5] == ["q1", "x", "q2", "y", "q3"] and "x" not in [m.id for m in added]
    assert len({m.id for m in added}) == 2


class _RenewlessSQLiteStore(SQLiteStore):
    """A store whose commit predates ``renew_taken_ids`` (the transcript renews ids itself)."""

    def commit(self, session_id: str, revision, *, expected_head):  # type: ignore[override]
        return super().commit(session_id, revision, expected_head=expected_head)


@pytest.mark.parametrize("store_class", [SQLiteStore, _RenewlessSQLiteStore], ids=["sqlite", "commit-without-renew"])
def test_two_writers_retrying_a_request_with_an_earlier_answer_store_it_once(tmp_path, store_class) -> None:
    """Two objects on one file retry [new question, the earlier answer x] at the same time: the
    first's write lands after the second decided x is no retry (and renewed it) but before its
    write transaction.  The second's decision is taken again on the log it commits on: a retry,
    nothing written."""
    path = tmp_path / "t.db"
    first, second = Transcript("s", store=store_class(path)), Transcript("s", store=store_class(path))
    try:
        first.append(messages=[Message("q1", "user", "Q1?"), Message("x", "assistant", "A1.")], renew_taken_ids=True)
        request = [Message("q2", "user", "Q2?"), Message("x", "assistant", "A1.")]
        commit, raced = second.store.commit, []

        def racing(*args, **kwargs):
            if not raced:  # once: the first's identical write lands between the decision and the write
                raced.append(first.append(messages=request, renew_taken_ids=True))
            return commit(*args, **kwargs)

        second.store.commit = racing  # type: ignore[method-assign]
        revision = second.append(messages=request, renew_taken_ids=True)
        assert raced and raced[0].changes and revision.changes == ()
        assert contents(second) == ["Q1?", "A1.", "Q2?", "A1."]
        with Transcript("s", store=SQLiteStore(path)) as fresh:
            assert contents(fresh) == ["Q1?", "A1.", "Q2?", "A1."]
    finally:
        first.close()
        second.close()
        first.store.close()
        second.store.close()


def test_a_renewed_earlier_answer_still_lands_after_an_unrelated_write_between_decision_and_commit(tmp_path) -> None:
    """Another writer's own turn lands between the decision (x is no retry: renew it) and the
    write: the decision, taken again, stands, and the request is stored whole, after that turn."""
    path = tmp_path / "t.db"
    with Transcript("s", store=SQLiteStore(path)) as first, Transcript("s", store=SQLiteStore(path)) as second:
        first.append(messages=[Message("q1", "user", "Q1?"), Message("x", "assistant", "A1.")], renew_taken_ids=True)
        commit, raced = second.store.commit, []

        def racing(*args, **kwargs):
            if not raced:
                raced.append(first.append(user="Other?", assistant="Other."))
            return commit(*args, **kwargs)

        second.store.commit = racing  # type: ignore[method-assign]
        second.append(messages=[Message("q2", "user", "Q2?"), Message("x", "assistant", "A1.")], renew_taken_ids=True)
        assert contents(first) == ["Q1?", "A1.", "Other?", "Other.", "Q2?", "A1."]
        assert [m.id for m in first.messages][-1] != "x"
