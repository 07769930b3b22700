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
import copy, fcntl, hashlib, os, pickle, threading, time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from context_gatekeeper.errors import CorruptLogError
from context_gatekeeper.records.operations import Change
from context_gatekeeper.stores import InMemoryStore, Store, prepare_commit
from context_gatekeeper.stores.base import checked_after, checked_keep
from context_gatekeeper.stores.integrity import index_of_log
from context_gatekeeper.testing.stores import Capabilities, StoreConformance, unwrapped
from context_gatekeeper.testing.store_contract import RACERS
from context_gatekeeper.testing.store_tampering import COPIED_FROM

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


class ChecksSomeLater(InMemoryStore):
    """Checks an edit against some of the revisions since expected_head only (see below)."""
    def commit(self, session_id, revision, *, expected_head, renew_taken_ids=False):
        with self._lock:
            log, index = self._logs.get(session_id, []), self._index.get(session_id, {})
            head = log[-1].number if log else 0
            since = log[expected_head:] if isinstance(expected_head, int) and 0 <= expected_head < head else []
            stored, rows = prepare_commit(session_id, revision, head, expected_head, self.checked(since),
                                          lambda ids: {i: index[i] for i in ids if i in index}, renew_taken_ids)
            if stored.number != head:
                self._logs.setdefault(session_id, []).append(stored.detached())
                self._index.setdefault(session_id, {}).update(rows)
            return stored.detached()


class ChecksOnlyTheHead(ChecksSomeLater):
    """... only the head revision (WHERE number = head)."""
    def checked(self, since):
        return since[-1:]


class ChecksOnlyTheFirst(ChecksSomeLater):
    """... only the first revision after expected_head (LIMIT 1)."""
    def checked(self, since):
        return since[:1]


class Folded(dict):
    """A dict comparing its keys folded by ``fold``, as a backend's collation or column does."""
    def __init__(self, fold):
        super().__init__()
        self.fold = fold
    def get(self, key, default=None):
        return super().get(self.fold(key), default)
    def setdefault(self, key, default=None):
        return super().setdefault(self.fold(key), default)
    def pop(self, key, *default):
        return super().pop(self.fold(key), *default)
    def __getitem__(self, key):
        return super().__getitem__(self.fold(key))
    def __setitem__(self, key, value):
        super().__setitem__(self.fold(key), value)
    def __contains__(self, key):
        return super().__contains__(self.fold(key))


class FoldsSessionIds(InMemoryStore):
    def __init__(self):
        super().__init__()
        self._logs, self._index, self._set_aside, self._vectors = (Folded(self.fold) for _ in range(4))


class PadSpace(FoldsSessionIds):
    """Trailing spaces do not count in session ids (a PAD SPACE collation, a CHAR column)."""
    fold = staticmethod(lambda s: s.rstrip(" "))


class CaseInsensitive(FoldsSessionIds):
    """Session ids compared without case (a case-insensitive collation)."""
    fold = staticmethod(str.lower)


class Cuts255(FoldsSessionIds):
    """Session ids cut to 255 characters (a VARCHAR(255) column in a non-strict SQL mode)."""
    fold = staticmethod(lambda s: s[:255])


class PrefixScan(InMemoryStore):
    """revisions(s) scans the keys starting 'rev:<s>:', which session '<s>:<anything>' has too."""
    def revisions(self, session_id, after=0):
        with self._lock:
            found = [r for name, log in self._logs.items() for r in log if f"{name}:".startswith(f"{session_id}:")]
        return [r.detached() for r in sorted(found, key=lambda r: r.number) if r.number > after]


class BlockingTwins(InMemoryStore):
    """Async twins written as 'async def' around the sync calls: they block the event loop."""
    async def ahead(self, session_id):
        return self.head(session_id)
    async def arevisions(self, session_id, after=0):
        return self.revisions(session_id, after)


class PurgeKeepsSetAside(InMemoryStore):
    """purge() leaves the revisions truncate set aside: a purged session's text survives."""
    def purge(self, session_id):
        with self._lock:
            aside = self._set_aside.pop(session_id, None)
        super().purge(session_id)
        with self._lock:
            if aside:
                self._set_aside[session_id] = aside


class DropsMetadataOfEdits(InMemoryStore):
    """Keeps the metadata of the messages an append puts, not of an edit's new versions."""
    def commit(self, session_id, revision, **options):
        changes = tuple(replace(c, after=replace(c.after, metadata={})) if isinstance(c, Change) else c
                        for c in revision.changes)
        return super().commit(session_id, replace(revision, changes=changes), **options)


class FileStore(Store):
    """Revision logs in a pickle file, which every handle on the path reads and rewrites
    under one lock per path in this process and a lock on a file beside it across processes."""
    locks = {}

    def __init__(self, path):
        self.path = Path(path)
        self._lock = self.locks.setdefault(str(path), threading.RLock())

    @contextmanager
    def _locked(self):
        with self._lock, open(self.path.with_name(f"{self.path.name}.lock"), "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)  # released when the file closes
            yield

    def _load(self):
        try:
            return pickle.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {"logs": {}, "index": {}, "aside": {}}

    def _save(self, state):
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        temporary.write_bytes(pickle.dumps(state))
        os.replace(temporary, self.path)

    def setup(self):
        pass

    def head(self, session_id):
        return self.tip(session_id)[0]

    def tip(self, session_id):
        with self._locked():
            log = self._load()["logs"].get(session_id)
            return (log[-1].number, log[-1].time) if log else (0, 0.0)

    def revisions(self, session_id, after=0):
        with self._locked():
            return self._load()["logs"].get(session_id, [])[max(after, 0):]

    @staticmethod
    def _prepared(state, session_id, revision, expected_head, renew_taken_ids):
        """``(stored revision, id index rows, head)`` of ``revision`` checked against ``state``."""
        log, index = state["logs"].get(session_id, []), state["index"].get(session_id, {})
        head = log[-1].number if log else 0
        since = log[expected_head:] if isinstance(expected_head, int) and 0 <= expected_head < head else []
        stored, rows = prepare_commit(session_id, revision, head, expected_head, since,
                                      lambda ids: {i: index[i] for i in ids if i in index}, renew_taken_ids)
        return stored, rows, head

    def commit(self, session_id, revision, *, expected_head, renew_taken_ids=False):
        with self._locked():
            self._fault("begin")
            state = self._load()
            stored, rows, head = self._prepared(state, session_id, revision, expected_head, renew_taken_ids)
            if stored.number == head:
                return stored.detached()
            state["logs"].setdefault(session_id, []).append(stored.detached())
            state["index"].setdefault(session_id, {}).update(rows)
            self._fault("written")
            self._fault("before_commit")
            self._save(state)
            return stored.detached()

    def truncate(self, session_id, keep):
        keep = checked_keep(keep)
        with self._locked():
            state = self._load()
            log = state["logs"].get(session_id, [])
            dropped = log[keep:]
            if dropped:
                state["aside"].setdefault(session_id, []).extend(dropped)
                del log[keep:]
                state["index"][session_id] = index_of_log(log)
                if not log:
                    del state["logs"][session_id]
                self._save(state)
            return len(dropped)

    def purge(self, session_id):
        with self._locked():
            state = self._load()
            for part in state.values():
                part.pop(session_id, None)
            self._save(state)

    def sessions(self):
        with self._locked():
            return sorted(self._load()["logs"])


class LocksPerHandle(FileStore):
    """A lock per handle, not per storage: two handles' commits read the same file and the
    last to write it drops the other's revision.  (The first commit of each handle waits
    for another handle's at the point both have read the file: they overlap every run.)"""
    meet = threading.Barrier(2)

    def __init__(self, path):
        super().__init__(path)
        self._lock, self._met = threading.RLock(), False

    @contextmanager
    def _locked(self):
        with self._lock:
            yield

    def _fault(self, point):
        if point == "written" and not self._met:
            self._met = True
            try:
                self.meet.wait(timeout=30)
            except threading.BrokenBarrierError:
                pass
        super()._fault(point)


class CachedTip(FileStore):
    """Keeps head and tip per handle, updated by its own commits only."""
    def __init__(self, path):
        super().__init__(path)
        self._tips = {}

    def tip(self, session_id):
        if session_id not in self._tips:
            self._tips[session_id] = super().tip(session_id)
        return self._tips[session_id]

    def commit(self, session_id, revision, **options):
        stored = super().commit(session_id, revision, **options)
        self._tips[session_id] = (stored.number, stored.time)
        return stored


class CachedRevisions(FileStore):
    """Keeps the revisions it read by (session, number): revisions never change, do they?"""
    def __init__(self, path):
        super().__init__(path)
        self._seen = {}

    def revisions(self, session_id, after=0):
        return [self._seen.setdefault((session_id, r.number), r) for r in super().revisions(session_id, after)]


PENDING = {}


class WriteBehind(FileStore):
    """Keeps what it writes in this process until close(): a worker that dies loses it."""
    def _load(self):
        pending = PENDING.get(str(self.path))
        return copy.deepcopy(pending) if pending is not None else super()._load()

    def _save(self, state):
        PENDING[str(self.path)] = copy.deepcopy(state)

    def close(self):
        with self._locked():
            if str(self.path) in PENDING:
                super()._save(PENDING.pop(str(self.path)))


class ThreadLockOnly(FileStore):
    """One lock per path in this process and no file lock: correct for the handles and threads
    of one process, while worker processes committing at once lose each other's revisions."""
    @contextmanager
    def _locked(self):
        with self._lock:
            yield


class ChecksEditsOutsideLock(FileStore):
    """Checks an edit against the file read without the lock, then (a round trip later, as a
    client of a remote store) writes it under the lock at whatever the head is by then: edits
    racing at one expected_head all pass their check, and all commit.  The racers all check
    before any writes (a barrier of the suite's racers: the interleaving a scheduler can give,
    forced, so the test fails every time; only the racing test runs on this class)."""
    checked = threading.Barrier(RACERS, timeout=30)

    def commit(self, session_id, revision, *, expected_head, renew_taken_ids=False):
        if expected_head is None:
            return super().commit(session_id, revision, expected_head=None, renew_taken_ids=renew_taken_ids)
        stored, rows, head = self._prepared(self._load(), session_id, revision, expected_head, renew_taken_ids)
        if stored.number == head:
            return stored.detached()
        self.checked.wait()
        with self._locked():
            state = self._load()
            log = state["logs"].setdefault(session_id, [])
            now = log[-1].number if log else 0
            stored = replace(stored, number=now + 1, parent=now)
            log.append(stored.detached())
            state["index"].setdefault(session_id, {}).update(rows)
            self._save(state)
            return stored.detached()


class HeadKeyedCache(FileStore):
    """Keeps the log it read per session while the head number stays the same (revisions never
    change, so the same head is the same log... until another handle purges or truncates and
    writes as many revisions again)."""
    def __init__(self, path):
        super().__init__(path)
        self._read = {}

    def revisions(self, session_id, after=0):
        after, head = checked_after(after), self.head(session_id)
        if self._read.get(session_id, (None,))[0] != head:
            self._read[session_id] = (head, super().revisions(session_id))
        return [r.detached() for r in self._read[session_id][1][after:]]


class AcceptsAfterClose(FileStore):
    """After close(), commit returns the revision numbered as stored, and writes nothing."""
    closed = False

    def close(self):
        self.closed = True

    def commit(self, session_id, revision, *, expected_head, renew_taken_ids=False):
        if self.closed:
            head = self.head(session_id)
            return replace(revision, number=head + 1, parent=head, base=head).stamped()
        return super().commit(session_id, revision, expected_head=expected_head, renew_taken_ids=renew_taken_ids)


class Suite(StoreConformance):
    capabilities = Capabilities(reopens=False)
    kind = InMemoryStore

    def make(self, where):
        return self.kind()


def tamper_in_memory(store, session, revision, how, digests=None):
    """Change revision ``revision`` of an in-memory log as the suite's tamperings say (moving
    the rows' entries in ``digests``, a dict by (session, number), along with them)."""
    log, i = store._logs[session], revision - 1
    digests = {} if digests is None else digests
    if how == "delete":
        del log[i]
    elif how == "kind":
        log[i] = replace(log[i], kind="bogus")
    elif how == "alter":
        change = log[i].changes[0]
        log[i] = replace(log[i], changes=(replace(change, message=replace(change.message, content="ALTERED")),
                                          *log[i].changes[1:]))
    elif how == "copy":
        log[i] = store._logs[COPIED_FROM][i]
        digests[(session, revision)] = digests.get((COPIED_FROM, revision))
    elif how == "swap":
        mine, theirs = log[i], log[i + 1]
        log[i] = replace(theirs, number=mine.number, parent=mine.parent)
        log[i + 1] = replace(mine, number=theirs.number, parent=theirs.parent)
        ours, next_one = (session, revision), (session, revision + 1)
        digests[ours], digests[next_one] = digests.get(next_one), digests.get(ours)
    elif how == "field":
        log[i] = replace(log[i], instruction="forged", time=log[i].time + 3600)


class PerRowDigest(InMemoryStore):
    """Tamper evidence by one digest per row (its number, kind and changes), chained to nothing:
    a row copied in from another session with its digest, or a field the digest leaves out, loads."""
    def __init__(self):
        super().__init__()
        self.digests = {}

    @staticmethod
    def digest(revision):
        return hashlib.sha256(f"{revision.number}|{revision.kind}|{revision.changes_json()}".encode("utf-8", "surrogatepass")).hexdigest()

    def commit(self, session_id, revision, **options):
        stored = super().commit(session_id, revision, **options)
        if stored.changes:
            self.digests[(session_id, stored.number)] = self.digest(stored)
        return stored

    def revisions(self, session_id, after=0):
        out = super().revisions(session_id, after)
        for revision in out:
            if self.digests.get((session_id, revision.number)) != self.digest(revision):
                raise CorruptLogError(session_id, revision.number, "its digest does not match")
        return out


class TestClaimsTamperEvidence(Suite):
    """Declares tamper_evident, but an in-memory log edited behind its back loads silently."""
    capabilities = Capabilities(reopens=False, tamper_evident=True)

    def tamper(self, store, session, revision, how):
        tamper_in_memory(store, session, revision, how)


class TestPerRowDigest(TestClaimsTamperEvidence):
    kind = PerRowDigest

    def tamper(self, store, session, revision, how):
        tamper_in_memory(store, session, revision, how, store.digests)


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


class TestClaimsThreads(Suite):
    """Declares threads (the default) for a store that refuses a second thread."""
    kind = OneThreadAtATime


class TestDropsMetadataOfEdits(Suite):
    kind = DropsMetadataOfEdits


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


class TestChecksOnlyTheHead(Suite):
    kind = ChecksOnlyTheHead


class TestChecksOnlyTheFirst(Suite):
    kind = ChecksOnlyTheFirst


class TestPadSpace(Suite):
    kind = PadSpace


class TestCaseInsensitive(Suite):
    kind = CaseInsensitive


class TestCuts255(Suite):
    kind = Cuts255


class TestPrefixScan(Suite):
    kind = PrefixScan


class TestBlockingTwins(Suite):
    kind = BlockingTwins


class TestPurgeKeepsSetAside(Suite):
    kind = PurgeKeepsSetAside

    def stored_state(self, store, session):
        return store.head(session), store.revisions(session), unwrapped(store)._set_aside.get(session, [])


class TestVectorsDeclaredOff(Suite):
    capabilities = Capabilities(reopens=False, vectors=False)  # yet InMemoryStore is a VectorStore


class TestTruncateDeclaredOff(Suite):
    capabilities = Capabilities(reopens=False, truncate=False)  # yet InMemoryStore has truncate


class Files(StoreConformance):
    capabilities = Capabilities(vectors=False, processes=True)
    kind = FileStore

    def make(self, where):
        return self.kind(where / "log.pickle")


class TestFileStore(Files):
    """The correct file store: passes what catches the file stores below."""


class TestLocksPerHandle(Files):
    kind = LocksPerHandle


class TestCachedTip(Files):
    kind = CachedTip


class TestCachedRevisions(Files):
    kind = CachedRevisions


class TestWriteBehind(Files):
    kind = WriteBehind


class TestThreadLockOnly(Files):
    kind = ThreadLockOnly


class TestChecksEditsOutsideLock(Files):
    kind = ChecksEditsOutsideLock


class TestHeadKeyedCache(Files):
    kind = HeadKeyedCache


class TestAcceptsAfterClose(Files):
    kind = AcceptsAfterClose
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
    "TestPerRowDigest": "changed_behind_the_store",
    "TestBeforeRenew": "optional_keyword or renewing_taken_ids or taken_id_is_renewed",
    "TestChecksOnlyTheHead": "checked_against_every_later_revision",
    "TestChecksOnlyTheFirst": "checked_against_every_later_revision",
    "TestPadSpace": "could_confuse",
    "TestCaseInsensitive": "could_confuse",
    "TestCuts255": "could_confuse",
    "TestPrefixScan": "could_confuse",
    "TestBlockingTwins": "lets_the_event_loop_run",
    "TestPurgeKeepsSetAside": "leaves_nothing_stored",
    "TestVectorsDeclaredOff": "test_revisions_after",
    "TestTruncateDeclaredOff": "test_revisions_after",
    "TestFileStore": "handles_committing_at_once or another_handle_wrote or survives_its_exit or processes_committing"
                     " or edits_racing or replaced_under_the_same_head or after_close",
    "TestLocksPerHandle": "handles_committing_at_once",
    "TestCachedTip": "another_handle_wrote",
    "TestCachedRevisions": "another_handle_wrote",
    "TestWriteBehind": "survives_its_exit",
    "TestThreadLockOnly": "processes_committing_at_once",
    "TestChecksEditsOutsideLock": "edits_racing",
    "TestHeadKeyedCache": "replaced_under_the_same_head",
    "TestAcceptsAfterClose": "after_close",
    "TestDropsMetadataOfEdits": "every_field_round_trips",
    "TestClaimsThreads": "threads_committing_appends",
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


@pytest.mark.parametrize(
    ("suite", "caught"),
    [
        # a gap, a bogus kind, turns out of order: the transcript's own checks name them, for any store
        ("TestClaimsTamperEvidence", {"delete", "kind", "swap"}),
        # one digest per row: its own number, kind and changes are checked; where it came from and
        # the fields it leaves out are not
        ("TestPerRowDigest", {"delete", "kind", "alter", "swap"}),
    ],
)
def test_a_store_claiming_tamper_evidence_without_it_fails(run: Run, suite: str, caught: set[str]) -> None:
    outcomes = run.of(suite)
    tamperings = {test.split("-")[-1].rstrip("]") for test in outcomes}
    assert tamperings == {"alter", "delete", "kind", "copy", "swap", "field"} and len(outcomes) == 12  # two modes
    for test, (outcome, reason) in outcomes.items():
        if test.split("-")[-1].rstrip("]") in caught:
            assert outcome == "PASSED", (test, outcome, reason)
        else:
            assert outcome == "FAILED" and "DID NOT RAISE" in reason, (test, outcome, reason)


def test_a_store_whose_commit_predates_renew_taken_ids_is_told_and_still_works(run: Run) -> None:
    outcomes = run.of("TestBeforeRenew")  # the skipped tests are reported by reason, not by name
    assert set(outcomes) == {f"test_appends_renewing_taken_ids_work_with_or_without_the_keyword[{m}]" for m in ("sync", "async")}
    assert all(outcome == "PASSED" for outcome, _ in outcomes.values()), outcomes
    assert "BeforeRenew.commit lacks the optional keyword(s) ['renew_taken_ids']: renew_taken_ids:" in run.output
    assert "BeforeRenew.commit does not take renew_taken_ids (optional" in run.output


def failed(outcomes: dict[str, tuple[str, str]]) -> set[str]:
    """The tests (``name[params]``) that failed."""
    return {test for test, (outcome, _) in outcomes.items() if outcome == "FAILED"}


@pytest.mark.parametrize(("suite", "missed"), [("TestChecksOnlyTheHead", "first"), ("TestChecksOnlyTheFirst", "last")])
def test_a_store_checking_an_edit_against_one_later_revision_fails(run: Run, suite: str, missed: str) -> None:
    """The conflicting revision is caught wherever it falls among those since expected_head."""
    outcomes = run.of(suite)
    assert len(outcomes) == 8, outcomes  # two positions, two kinds of conflict, two modes
    assert failed(outcomes) == {test for test in outcomes if f"-{missed}-" in test}, outcomes


@pytest.mark.parametrize("suite", ["TestPadSpace", "TestCaseInsensitive", "TestCuts255", "TestPrefixScan"])
def test_a_store_confusing_two_session_ids_fails(run: Run, suite: str) -> None:
    outcomes = run.of(suite)
    assert len(outcomes) == 2 and failed(outcomes) == set(outcomes), outcomes


def test_a_store_whose_async_twins_block_the_event_loop_fails_naming_them(run: Run) -> None:
    outcomes = run.of("TestBlockingTwins")  # runs once, in the sync mode
    assert set(outcomes) == {"test_every_async_twin_lets_the_event_loop_run[sync]"}
    ((outcome, reason),) = outcomes.values()
    assert outcome == "FAILED" and "['ahead', 'arevisions'] returned without ever yielding" in reason, (outcome, reason)


def test_a_purge_leaving_set_aside_revisions_fails_when_stored_state_shows_them(run: Run) -> None:
    outcomes = run.of("TestPurgeKeepsSetAside")
    assert len(outcomes) == 2 and failed(outcomes) == set(outcomes), outcomes
    assert all("purge left some of the session stored" in reason for _, reason in outcomes.values()), outcomes


@pytest.mark.parametrize(("suite", "says"), [
    ("TestVectorsDeclaredOff", "declares Capabilities(vectors=False), but InMemoryStore is a VectorStore"),
    ("TestTruncateDeclaredOff", "declares Capabilities(truncate=False), but InMemoryStore overrides Store.truncate"),
])
def test_a_capability_declared_off_that_the_store_has_errors_instead_of_skipping(run: Run, suite: str, says: str) -> None:
    outcomes = run.of(suite)
    assert len(outcomes) == 2, outcomes
    for outcome, reason in outcomes.values():
        assert outcome == "ERROR" and "InvalidInputError" in reason and says in reason, (outcome, reason)


def test_a_correct_file_store_passes_what_catches_the_broken_ones(run: Run) -> None:
    outcomes = run.of("TestFileStore")
    in_both_modes = ("handles_committing_at_once_lose_nothing", "a_handle_reads_what_another_handle_wrote_purged_and_truncated",
                     "edits_racing_at_one_expected_head_commit_once", "a_commit_after_close_raises_or_is_kept")
    assert {test for test in outcomes if not test.startswith("test_a_handle_never_serves_text_replaced")} == {
        *(f"test_{name}[{mode}]" for mode in ("sync", "async") for name in in_both_modes),
        "test_what_a_process_committed_survives_its_exit_without_close[sync]",
        "test_processes_committing_at_once_lose_nothing[sync]",
    }, outcomes
    assert len(outcomes) == 2 * len(in_both_modes) + 2 + 4, outcomes  # and purge or truncate, in both modes
    assert {outcome for outcome, _ in outcomes.values()} == {"PASSED"}, outcomes


@pytest.mark.parametrize(("suite", "says"), [
    ("TestLocksPerHandle", "handles committing at once lost or reused numbers"),
    ("TestCachedTip", "a handle served a stale head or tip"),
    ("TestCachedRevisions", "a handle served revisions another handle replaced or set aside"),
    ("TestWriteBehind", "commits of a process that exited without close() were lost"),
])
def test_a_store_whose_handles_or_processes_disagree_fails(run: Run, suite: str, says: str) -> None:
    outcomes = run.of(suite)
    assert outcomes and failed(outcomes) == set(outcomes), outcomes
    assert all(says in reason for _, reason in outcomes.values()), outcomes


@pytest.mark.parametrize(("suite", "says"), [
    ("TestThreadLockOnly", "processes committing at once lost or reused numbers"),
    ("TestChecksEditsOutsideLock", "edits racing at one expected_head"),
    ("TestHeadKeyedCache", "a handle served revisions another handle replaced or set aside"),
    ("TestAcceptsAfterClose", "commit after close() returned revision 2"),
])
def test_a_store_racing_other_processes_edits_or_its_own_close_fails(run: Run, suite: str, says: str) -> None:
    """Commits of two worker processes at once, edits at one expected_head released together,
    a log replaced under the same head number, a commit after close: each bug its own test."""
    outcomes = run.of(suite)
    assert outcomes and failed(outcomes) == set(outcomes), outcomes
    assert all(says in reason for _, reason in outcomes.values()), outcomes


def test_a_store_dropping_what_an_edit_sent_fails_the_round_trip(run: Run) -> None:
    """The log is compared with the revision as sent (metadata of an edit's new version
    included), not with what commit returned, which the same bug shaped."""
    outcomes = run.of("TestDropsMetadataOfEdits")
    assert len(outcomes) == 2 and failed(outcomes) == set(outcomes), outcomes
    assert all("not the revision as sent" in reason for _, reason in outcomes.values()), outcomes


def test_a_failed_check_says_what_it_compared_and_what_was_raised(run: Run) -> None:
    """The suite's asserts are rewritten by pytest (an installed package's are not, unless
    registered): a plain assert reports both sides, and threads' errors are named."""
    (reason, *_) = [reason for _, reason in run.of("TestListsEmptied").values()]
    assert "assert ([" in reason and "== (['kept'], 0, [])" in reason, reason  # not a bare AssertionError
    outcomes = run.of("TestClaimsThreads")
    assert len(outcomes) == 2 and failed(outcomes) == set(outcomes), outcomes
    assert all("OneThreadAtATime was called from two threads at once" in reason for _, reason in outcomes.values()), outcomes
