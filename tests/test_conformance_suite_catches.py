"""The shipped store conformance suite fails (never hangs, never passes) a store with a real bug.

One small pytest run, in a directory of its own, drives the suite
(:mod:`context_gatekeeper.testing.stores`) against in-memory stores that each carry one
bug a third party could write, with a ``-k`` filter keeping it to the tests that must
catch each bug; every test here reads the outcomes of one store's class.  A suite that
lets the bug through shows up as a PASSED line where FAILED is expected; one that hangs,
as the run's timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from context_gatekeeper.errors import InvalidInputError, InvalidTypeError
from context_gatekeeper.testing.stores import checked_modes, storage_key

BUGGY_STORES = '''
import threading, time
from pathlib import Path
from context_gatekeeper.stores import InMemoryStore
from context_gatekeeper.testing.stores import Capabilities, StoreConformance

HERE = Path(__file__).parent


class NoHooks(InMemoryStore):
    """Never calls its fault hook, yet keeps the default Capabilities(fault_hooks=True)."""
    def _fault(self, point):
        pass


class TruncateKeepsIndex(InMemoryStore):
    """truncate() leaves the ids of the revisions it set aside in the id index."""
    def truncate(self, session_id, keep):
        with self._lock:
            index = dict(self._index.get(session_id, {}))
        dropped = super().truncate(session_id, keep)
        with self._lock:
            self._index.setdefault(session_id, {}).update(index)
        return dropped


class SharesObjects(InMemoryStore):
    """Hands out the revisions it keeps, not copies."""
    def revisions(self, session_id, after=0):
        with self._lock:
            return list(self._logs.get(session_id, [])[max(after, 0):])


class ListsEmptied(InMemoryStore):
    """truncate(s, 0) leaves an empty log that sessions() still lists."""
    def truncate(self, session_id, keep):
        dropped = super().truncate(session_id, keep)
        with self._lock:
            self._logs.setdefault(session_id, [])
        return dropped


class OneThreadAtATime(InMemoryStore):
    """Honestly not thread-safe: a write while another runs fails (Capabilities(threads=False))."""
    def __init__(self):
        super().__init__()
        self._busy = threading.Lock()

    def _alone(self, call):
        if not self._busy.acquire(blocking=False):
            raise AssertionError("OneThreadAtATime was called from two threads at once")
        try:
            time.sleep(0.002)
            return call()
        finally:
            self._busy.release()

    def commit(self, *args, **kwargs):
        return self._alone(lambda: super(OneThreadAtATime, self).commit(*args, **kwargs))

    def purge(self, session_id):
        return self._alone(lambda: super(OneThreadAtATime, self).purge(session_id))

    def save_vectors(self, session_id, rows):
        return self._alone(lambda: super(OneThreadAtATime, self).save_vectors(session_id, rows))


class BeforeRenew(InMemoryStore):
    """A store written before commit took renew_taken_ids (not a bug: an older contract)."""
    def commit(self, session_id, revision, *, expected_head):
        return super().commit(session_id, revision, expected_head=expected_head)


class Suite(StoreConformance):
    capabilities = Capabilities(reopens=False)
    kind = InMemoryStore

    def make(self, where):
        return self.kind()


class TestClaimsTamperEvidence(Suite):
    """Declares tamper_evident, but an in-memory log edited behind its back loads silently."""
    capabilities = Capabilities(reopens=False, tamper_evident=True)

    def tamper(self, store, session, revision, how):
        log = store._logs[session]
        if how == "delete":
            del log[revision - 1]
        elif how == "kind":
            log[revision - 1] = log[revision - 1].__class__(**{**{f: getattr(log[revision - 1], f) for f in (
                "number", "parent", "changes", "instruction", "model", "time", "base", "target")}, "kind": "bogus"})
        else:
            from context_gatekeeper.records.operations import Put
            old = log[revision - 1]
            change = old.changes[0]
            altered = Put(change.message.__class__(change.message.id, change.message.role, "ALTERED"), change.after)
            log[revision - 1] = old.__class__(old.number, old.parent, old.kind, (altered, *old.changes[1:]))


class TestBeforeRenew(Suite):
    kind = BeforeRenew


class TestNoHooks(Suite):
    kind = NoHooks


class TestTruncateKeepsIndex(Suite):
    kind = TruncateKeepsIndex


class TestSharesObjects(Suite):
    kind = SharesObjects


class TestListsEmptied(Suite):
    kind = ListsEmptied


class TestOneThreadAtATime(Suite):
    capabilities = Capabilities(reopens=False, threads=False)
    kind = OneThreadAtATime


class TestModesTypo(Suite):
    modes = ("Sync", "Async")


class TestModesEmpty(Suite):
    modes = ()


class TestModesString(Suite):
    modes = "async"


class TestDestroys(Suite):
    handles = {}

    def make(self, where):
        store = super().make(where)
        store.closed = False
        store.close = lambda: setattr(store, "closed", True)
        self.handles.setdefault(str(where), []).append(store)
        return store

    def destroy(self, where):
        closed = all(store.closed for store in self.handles[str(where)])
        with open(HERE / "destroyed.txt", "a") as log:
            log.write(f"{where} closed={closed}\\n")
'''

SELECTED = {
    "TestNoHooks": "does_not_block_the_event_loop",
    "TestTruncateKeepsIndex": "truncate_sets_aside or rebuilt_index",
    "TestSharesObjects": "handed_out",
    "TestListsEmptied": "truncated_to_nothing",
    "TestOneThreadAtATime": "async_twins_match",
    "TestModesTypo": "test_revisions_after",
    "TestModesEmpty": "test_revisions_after",
    "TestModesString": "test_revisions_after",
    "TestDestroys": "test_revisions_after or test_tip_is",
    "TestClaimsTamperEvidence": "changed_behind_the_store",
    "TestBeforeRenew": "optional_keyword or renewing_taken_ids or taken_id_is_renewed",
}
"""Each buggy store's class, and the tests (a ``-k`` expression) that must catch its bug."""

OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED) test_buggy_stores\.py::(\w+)::(\w+\[[\w-]+\])(?: - (.*))?$")


class Run:
    """The outcomes of the one pytest run over :data:`BUGGY_STORES`."""

    def __init__(self, directory: Path, result: subprocess.CompletedProcess[str]) -> None:
        self.directory, self.output = directory, result.stdout + result.stderr
        self.returncode = result.returncode
        self.outcomes: dict[str, dict[str, tuple[str, str]]] = {}
        for line in result.stdout.splitlines():
            if found := OUTCOME.match(line):
                outcome, suite, test, reason = found.groups()
                self.outcomes.setdefault(suite, {})[test] = (outcome, reason or "")

    def of(self, suite: str) -> dict[str, tuple[str, str]]:
        """``{test[mode]: (outcome, short reason)}`` for one class; it must have run."""
        assert suite in self.outcomes, self.output[-4000:]
        return self.outcomes[suite]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    directory = tmp_path_factory.mktemp("buggy_stores")
    (directory / "test_buggy_stores.py").write_text(BUGGY_STORES)
    selection = " or ".join(f"({suite} and ({tests}))" for suite, tests in SELECTED.items())
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-rA", "--rootdir", str(directory),
        "-k", selection, "test_buggy_stores.py",
    ]
    wide = {**os.environ, "COLUMNS": "1000"}  # the summary's reasons uncut
    result = subprocess.run(command, capture_output=True, text=True, cwd=directory, env=wide, timeout=300)
    return Run(directory, result)


def test_a_store_that_never_calls_its_fault_hook_fails_the_async_commit_test_without_hanging(run: Run) -> None:
    outcomes = run.of("TestNoHooks")
    assert set(outcomes) == {f"test_async_commit_does_not_block_the_event_loop[{m}]" for m in ("sync", "async")}
    for outcome, reason in outcomes.values():
        assert outcome == "FAILED" and "acommit never called fault_hook('begin')" in reason, (outcome, reason)
    assert run.returncode == 1


def test_a_truncate_that_keeps_the_set_aside_ids_fails_both_truncate_tests(run: Run) -> None:
    outcomes = run.of("TestTruncateKeepsIndex")
    assert len(outcomes) == 4 and {outcome for outcome, _ in outcomes.values()} == {"FAILED"}, outcomes


def test_a_store_handing_out_the_revisions_it_keeps_fails(run: Run) -> None:
    outcomes = run.of("TestSharesObjects")
    assert len(outcomes) == 2 and {outcome for outcome, _ in outcomes.values()} == {"FAILED"}, outcomes


def test_a_store_listing_a_session_truncated_to_nothing_fails(run: Run) -> None:
    outcomes = run.of("TestListsEmptied")
    assert len(outcomes) == 2 and {outcome for outcome, _ in outcomes.values()} == {"FAILED"}, outcomes


def test_threads_declared_off_runs_the_async_twins_one_at_a_time(run: Run) -> None:
    outcomes = run.of("TestOneThreadAtATime")
    names = {"test_async_twins_match_the_sync_methods", "test_vector_async_twins_match"}
    assert set(outcomes) == {f"{name}[{mode}]" for name in names for mode in ("sync", "async")}
    assert {outcome for outcome, _ in outcomes.values()} == {"PASSED"}, outcomes


@pytest.mark.parametrize(
    ("suite", "error"),
    [("TestModesTypo", "InvalidInputError"), ("TestModesEmpty", "InvalidInputError"), ("TestModesString", "InvalidTypeError")],
)
def test_modes_that_are_not_a_tuple_of_known_modes_error_instead_of_skipping(run: Run, suite: str, error: str) -> None:
    outcomes = run.of(suite)
    assert set(outcomes) == {"test_revisions_after[sync]", "test_revisions_after[async]"}
    for outcome, reason in outcomes.values():
        assert outcome == "ERROR" and error in reason, (outcome, reason)


def test_destroy_runs_once_per_test_after_its_handles_are_closed(run: Run) -> None:
    outcomes = run.of("TestDestroys")
    assert len(outcomes) == 4 and {outcome for outcome, _ in outcomes.values()} == {"PASSED"}, outcomes
    lines = (run.directory / "destroyed.txt").read_text().splitlines()
    assert len(lines) == 4 and len({line.split()[0] for line in lines}) == 4, lines
    assert all(line.endswith("closed=True") for line in lines), lines


def test_checked_modes_says_what_is_wrong() -> None:
    assert checked_modes("TestX", ("async",)) == ("async",)
    assert checked_modes("TestX", ("sync", "async")) == ("sync", "async")
    with pytest.raises(InvalidInputError, match=r"unknown modes \['Sync'\]; choose one or more of \('sync', 'async'\)"):
        checked_modes("TestX", ("Sync",))
    with pytest.raises(InvalidInputError, match="runs nothing"):
        checked_modes("TestX", ())
    with pytest.raises(InvalidTypeError, match=r"write modes = \('async',\)"):
        checked_modes("TestX", "async")
    with pytest.raises(InvalidTypeError, match="TestX.modes must be a tuple"):
        checked_modes("TestX", ["sync"])


def test_storage_key_is_stable_per_directory_and_unique_across_directories(tmp_path: Path) -> None:
    first, second = tmp_path / "test_a0", tmp_path / "run2" / "test_a0"  # the same name, as in a second run
    second.mkdir(parents=True)
    first.mkdir()
    key = storage_key(first)
    assert key == storage_key(first) and key.startswith("cg-test-")
    assert storage_key(second) != key


def test_a_store_claiming_tamper_evidence_without_it_fails(run: Run) -> None:
    outcomes = run.of("TestClaimsTamperEvidence")
    assert len(outcomes) == 6  # three tamperings, two modes
    for test, (outcome, reason) in outcomes.items():
        if "alter" in test:
            assert outcome == "FAILED" and "DID NOT RAISE" in reason, (test, outcome, reason)
        else:  # a gap or a bogus kind: the transcript's own checks name them, for any store
            assert outcome == "PASSED", (test, outcome, reason)


def test_a_store_whose_commit_predates_renew_taken_ids_is_told_and_still_works(run: Run) -> None:
    outcomes = run.of("TestBeforeRenew")  # the skipped tests are reported by reason, not by name
    assert set(outcomes) == {f"test_appends_renewing_taken_ids_work_with_or_without_the_keyword[{m}]" for m in ("sync", "async")}
    assert all(outcome == "PASSED" for outcome, _ in outcomes.values()), outcomes
    assert "BeforeRenew.commit lacks the optional keyword(s) ['renew_taken_ids']: renew_taken_ids:" in run.output
    assert "BeforeRenew.commit does not take renew_taken_ids (optional" in run.output
