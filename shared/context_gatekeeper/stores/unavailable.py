"""SQLite's failures of the storage itself, as :class:`StoreUnavailableError`.

A locked or busy database, a full disk, an I/O error, a file that cannot be opened or is
damaged: the driver says so with an ``sqlite3.OperationalError`` (or ``DatabaseError``)
whose text alone does not say what to do.  :func:`sqlite_errors` turns those into
:class:`StoreUnavailableError` (an ``OSError``), whose message says what happened and
what to do, with the driver's error as ``__cause__``.  Errors that are not about the
storage (a missing table before ``setup()``, a constraint) pass through unchanged.
PostgreSQL's twin is :func:`context_gatekeeper.stores.postgres_ops.postgres_errors`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import StoreUnavailableError

__all__ = ["sqlite_errors", "sqlite_unavailable", "cannot_open"]

# primary result codes (https://www.sqlite.org/rescode.html)
_BUSY, _LOCKED, _NOMEM, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _PROTOCOL, _NOTADB = 5, 6, 7, 8, 10, 11, 13, 14, 15, 26
_BY_TEXT = (
    ("database is locked", _BUSY),
    ("database table is locked", _LOCKED),
    ("disk is full", _FULL),
    ("disk i/o error", _IOERR),
    ("unable to open database", _CANTOPEN),
    ("readonly database", _READONLY),
    ("malformed", _CORRUPT),
    ("not a database", _NOTADB),
    ("out of memory", _NOMEM),
    ("locking protocol", _PROTOCOL),
)


_IOERR_SHMSIZE = _IOERR | (19 << 8)
"""An extended code: the ``-shm`` index could not be given its size, as the disk (or the
process's file size limit) has no room for it."""


def _code(exc: sqlite3.Error) -> int | None:
    """The primary result code of ``exc`` (from its text when the driver gives none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    text = str(exc).lower()
    return next((c for needle, c in _BY_TEXT if needle in text), None)


def _no_room(exc: sqlite3.Error, code: int | None) -> bool:
    """Whether ``exc`` says the disk is full: ``SQLITE_FULL``, or the extended I/O error of a
    ``-shm`` file that could not be sized (which the primary code alone calls an I/O error)."""
    return code == _FULL or getattr(exc, "sqlite_errorcode", None) == _IOERR_SHMSIZE


def _why_unopened(path: str, read_only: bool) -> str:
    """What keeps SQLite from opening ``path``, as the file system tells once an open failed
    (SQLite says "unable to open database file" whatever the reason), and what to do."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return (f"it is a folder, not a database file. Pass the path of a file in it (such as "
                f"{os.path.join(path, 'chat.db')!r}, which the store creates)")
    if not os.path.isdir(folder):
        return f"its folder {folder!r} does not exist. Create it (os.makedirs) or fix the path"
    if read_only and not os.path.lexists(path):
        return ("the file does not exist, and read_only=True creates nothing. Check the path, or open "
                "SQLiteStore(path) without read_only to create a new database")
    if not read_only and not os.access(folder, os.W_OK | os.X_OK):
        return ("its folder is not writable (the file and its -wal and -shm files are made there) or is on a read-only "
                "mount. Check the folder's permissions; to read a database on a read-only mount, open "
                "SQLiteStore(path, read_only=True)")
    blocked = _inaccessible(path, read_only)
    if blocked:
        how = "read" if read_only else "read and written"
        return (f"{', '.join(map(repr, blocked))} cannot be {how} by this user. Check the permissions and owner of "
                "those files (a -wal or -shm file made by another user, for instance); every program using the "
                "database must be able to write them")
    return ("the cause is unknown: the folder and the files are accessible, and SQLite gives no more than the text "
            "above. The process may be out of file descriptors (too many open files) or memory, or the file system "
            "refused the open; check those, then retry")


def _inaccessible(path: str, read_only: bool) -> list[str]:
    """The database file and its -wal and -shm files, those that exist, that this user cannot read
    (or, unless ``read_only``, write): what keeps SQLite from opening the database in a folder it can use."""
    mode = os.R_OK if read_only else os.R_OK | os.W_OK
    return [name for name in (path, f"{path}-wal", f"{path}-shm")
            if os.path.lexists(name) and not os.access(name, mode)]


def cannot_open(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the file could not be opened, or not as asked (read-only media)."""
    return _code(exc) in (_CANTOPEN, _READONLY, _IOERR)


def sqlite_unavailable(
    exc: BaseException, path: str, busy_timeout: float | None = None, *, read_only: bool = False
) -> StoreUnavailableError | None:
    """The :class:`StoreUnavailableError` for ``exc`` raised on the database ``path``, opened
    ``read_only`` or not (None: ``exc`` is not a failure of the storage)."""
    if not isinstance(exc, sqlite3.Error):
        return None
    code = _code(exc)
    where = f"the SQLite database {path!r}"
    said = f"(SQLite: {exc})"
    if code in (_BUSY, _LOCKED, _PROTOCOL):
        waited = f" for {busy_timeout:g} s (busy_timeout)" if busy_timeout is not None else ""
        text = (
            f"{where} is locked by another connection or process and stayed locked{waited} {said}; nothing was "
            "written. Retry once the other writer is done, give SQLiteStore a longer busy_timeout, or find the "
            "process holding the database open in a transaction"
        )
    elif _no_room(exc, code):
        text = (
            f"the disk holding {where} is full {said}; nothing was written and what was stored is intact. Free "
            "space on that disk (or move the database to a larger one), then retry"
        )
    elif code == _CANTOPEN or (code == _IOERR and os.path.isdir(path)):  # a folder read says "disk I/O error"
        text = f"cannot open {where} {said}: {_why_unopened(path, read_only)}"
    elif code == _IOERR:
        text = (
            f"an I/O error on {where} {said}; the operation was not done. Check the disk, and that the database's "
            "-wal and -shm files were not deleted or moved while it was open (if they were, close every program "
            "using it and open it again); then retry"
        )
    elif code == _READONLY:
        text = (
            f"{where} cannot be written {said}: the file, its folder or its mount is read-only, or the store was "
            "opened with read_only=True; nothing was written. Open a writable copy to change it"
        )
    elif code in (_CORRUPT, _NOTADB):
        text = (
            f"{where} is damaged or is not an SQLite database {said}. Restore it from a backup; the sqlite3 "
            "command's .recover may save what is still readable"
        )
    elif code == _NOMEM:
        text = f"SQLite ran out of memory on {where} {said}; nothing was written. Free memory, then retry"
    else:
        return None
    return StoreUnavailableError(text)


@contextmanager
def sqlite_errors(path: str, busy_timeout: float | None = None, *, read_only: bool = False) -> Iterator[None]:
    """Raise the storage failures of the block as :class:`StoreUnavailableError` (the
    driver's error as ``__cause__``; ``read_only``: the database was opened so); every
    other exception passes unchanged."""
    try:
        yield
    except sqlite3.Error as exc:
        error = sqlite_unavailable(exc, path, busy_timeout, read_only=read_only)
        if error is None:
            raise
        raise error from exc
