"""The ``/save`` and ``/load`` file format: plain JSON, validated on load, never pickle.

A session file holds the conversation's current state (not its revision log)::

    {
      "format": "context-gatekeeper-chat",
      "version": 1,
      "session": "default",
      "saved_at": "2025-01-31T12:00:00+00:00",
      "pinned": ["3f2a9c0d1e2b"],
      "messages": [
        {"id": "3f2a9c0d1e2b", "role": "user", "content": "What was Iceland's GDP?"},
        {"id": "9b8c7d6e5f4a", "role": "assistant", "content": "About 28 billion USD.",
         "metadata": {"gatekeeper_context": {"decision": "switch", "earlier": []}}}
      ]
    }

* ``format`` and ``version`` are required and must be exactly these values.
* ``messages`` is required: a list of objects with ``role`` (``system``, ``user``,
  ``assistant`` or ``tool``) and ``content`` (a string); ``id`` is optional (a
  non-empty string, unique in the file); ``parts`` (a list: provider content blocks)
  and ``metadata`` (an object: tool calls, ``tool_call_id``, the web chat's context
  record) are optional and written only when a message has them, so a tool call
  keeps its result and an answer its context strip.  Other message keys are ignored.
* ``/load`` keeps a message whose id and role the conversation holds as it is held
  when its text is the same (loading what ``/save`` just wrote changes nothing), and
  takes the held parts and metadata for a message the file gives none (files
  written before ``parts`` and ``metadata`` were saved).
* ``pinned`` is optional: ids of the first message of each pinned turn.
* ``session`` and ``saved_at`` are informational.
* Text is normalised as every store keeps it (:func:`~context_gatekeeper.records.messages.normalized_text`):
  ``/save`` writes, and ``/load`` reads, surrogate pairs joined and each lone surrogate
  (``"\\ud800"`` in JSON: valid JSON, not valid Unicode, which no terminal or model can
  take) as the six characters ``\\ud800``, so what ``/save`` writes ``/load`` reads,
  including files written before this rule.

:func:`write_session_file` writes a temporary file in the same folder and renames
it over the target, so a failed write leaves the target as it was and no
temporary file behind.  It refuses to write over the chat's own database (or its
``-wal`` / ``-shm`` / ``-journal`` files, symlinks resolved), over any SQLite
database, and over anything but a regular file (a named pipe, a device, a socket:
opening one to look at it could block forever); :func:`read_session_file` reads
regular files only, and never more than :data:`MAX_BYTES` and one byte.

:func:`read_session_file` checks everything before anything is used, and raises
:class:`SessionFileError` listing every problem (with its JSON path), so a bad
file never touches the current conversation; that includes ``parts`` or ``metadata``
nested deeper than :data:`MAX_NESTING` levels (or too deep for the JSON decoder), which
the copies and the store would fail on.

>>> data = session_document("demo", [Message("a", "user", "hi")], pinned=["a"])
>>> parse_session_document(json.loads(json.dumps(data))).messages[0].content
'hi'
>>> parse_session_document({"format": "context-gatekeeper-chat", "version": 1, "messages": [{"role": "bot"}]})
Traceback (most recent call last):
...
context_gatekeeper.chat.session_file.SessionFileError: not a valid session file: messages[0].role must be one of system, user, assistant, tool (got 'bot'); messages[0].content must be a string
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..integration import ROLES, new_message_id, normalized_text
from .. import GatekeeperError, Message

__all__ = [
    "FORMAT",
    "VERSION",
    "SessionFile",
    "SessionFileError",
    "session_document",
    "parse_session_document",
    "write_session_file",
    "read_session_file",
]

FORMAT = "context-gatekeeper-chat"
VERSION = 1
MAX_BYTES = 50_000_000
"""Files larger than this are refused (no more than one byte over it is read)."""
MAX_NESTING = 100
"""The deepest a message's ``parts`` or ``metadata`` may nest (the object or list itself is one
level): deeper data is refused on load, since copying and storing it would exhaust Python's
recursion limit (and real content blocks and tool calls nest a few levels)."""
_SQLITE_MAGIC = b"SQLite format 3\x00"


class SessionFileError(GatekeeperError, ValueError):
    """A session file that cannot be read or is not valid; nothing was loaded."""


@dataclass(frozen=True)
class SessionFile:
    """A validated session file.

    Attributes:
        messages: the conversation, in order (ids from the file, or new ones).
        pinned: ids of first messages of pinned turns.
        session: the session name it was saved from ("" if absent).
    """

    messages: tuple[Message, ...]
    pinned: tuple[str, ...]
    session: str


def session_document(session: str, messages: Sequence[Message], *, pinned: Iterable[str] = ()) -> dict[str, Any]:
    """The JSON document for a conversation (what ``/save`` writes)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "session": session,
        "saved_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "pinned": sorted(normalized_text(p) for p in pinned),
        "messages": [_message_document(m) for m in messages],
    }


def _message_document(message: Message) -> dict[str, Any]:
    """One message as the file holds it (``parts`` and ``metadata`` only when it has them)."""
    data: dict[str, Any] = {
        "id": normalized_text(message.id), "role": message.role, "content": normalized_text(message.content)
    }
    if message.parts is not None:
        data["parts"] = list(message.parts)
    if message.metadata:
        data["metadata"] = dict(message.metadata)
    return data


def _database_files(database: str | os.PathLike[str]) -> set[Path]:
    """The resolved paths of an SQLite database and its side files."""
    base = Path(database).expanduser().resolve()
    return {base} | {base.with_name(base.name + suffix) for suffix in ("-wal", "-shm", "-journal")}


_SPECIAL_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_special(path: Path, mode: int, command: str) -> None:
    """:class:`SessionFileError` unless ``mode`` is a regular file's: reading a pipe or a
    device can block forever (or never end), and replacing one breaks what uses it."""
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), "not a regular file")
    raise SessionFileError(
        f"{path} is {kind}; {command} uses regular files only, and nothing was changed. Give the path of a "
        f"file, e.g. {command} chat.json"
    )


def _open_regular(path: Path, command: str) -> IO[bytes]:
    """``path`` opened for reading, when it is a regular file (:func:`_refuse_special`);
    ``OSError`` when it cannot be opened.  Checked before opening (opening a pipe blocks)
    and again on what was opened (never blocking: something else may have taken its place)."""
    _refuse_special(path, path.stat().st_mode, command)
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        _refuse_special(path, os.fstat(descriptor).st_mode, command)
    except BaseException:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "rb")


def _check_target(target: Path, protected: Iterable[str | os.PathLike[str]]) -> None:
    """Refuse a target that is (or links to) a protected database, any SQLite database, or
    something other than a regular file (a folder, a pipe, a device, a socket)."""
    resolved = target.resolve()
    for database in protected:
        if resolved in _database_files(database):
            raise SessionFileError(
                f"{target} is the chat's own database{' (through a link)' if resolved != target.absolute() else ''}; "
                "/save did not write it (that would destroy every session). Give another path, e.g. /save chat.json"
            )
    if resolved.is_dir():  # refused here, as a pipe or a device is: no temporary file is made
        _refuse_special(target, resolved.stat().st_mode, "/save")
    try:
        with _open_regular(target, "/save") as existing:
            header = existing.read(len(_SQLITE_MAGIC))
    except OSError:
        return  # missing (fine) or unreadable (the write says why)
    if header == _SQLITE_MAGIC:
        raise SessionFileError(f"{target} is an SQLite database; /save does not overwrite databases. Give another path")


def write_session_file(
    path: str | os.PathLike[str],
    document: dict[str, Any],
    *,
    protected: Iterable[str | os.PathLike[str]] = (),
) -> Path:
    """Write ``document`` to ``path`` atomically (a temporary file in the same folder, then a rename).

    Args:
        path: the file to write.
        document: what :func:`session_document` built.
        protected: database files that must never be overwritten (the chat passes its ``--db``).

    Raises:
        SessionFileError: ``path`` is a protected database, an SQLite file or not a regular
            file (a folder, a pipe, a device, a socket); nothing was written.
        OSError: the write failed; ``path`` is unchanged and no temporary file is left.
    """
    target = Path(path).expanduser()
    _check_target(target, protected)
    try:
        text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate already in the transcript: keep it, escaped
        data = (json.dumps(document, ensure_ascii=True, indent=2) + "\n").encode("ascii")
    folder = target.resolve().parent
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target.resolve())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return target


def _check_message(index: int, item: Any, problems: list[str], seen: set[str]) -> None:
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        problems.append(f"{where} must be an object with role and content")
        return
    role = item.get("role")
    if role not in ROLES:
        problems.append(f"{where}.role must be one of {', '.join(ROLES)} (got {role!r})")
    content = item.get("content")
    if not isinstance(content, str):
        problems.append(f"{where}.content must be a string")
    if item.get("parts") is not None and not isinstance(item["parts"], list):
        problems.append(f"{where}.parts must be a list of content blocks (or absent)")
    if item.get("metadata") is not None and not isinstance(item["metadata"], dict):
        problems.append(f"{where}.metadata must be an object (or absent)")
    for key in ("parts", "metadata"):
        if _nesting(item.get(key)) > MAX_NESTING:
            problems.append(f"{where}.{key} is nested too deeply (more than {MAX_NESTING} levels)")
    if "id" in item:
        message_id = item["id"]
        if not isinstance(message_id, str) or not message_id:
            problems.append(f"{where}.id must be a non-empty string")
        elif normalized_text(message_id) in seen:
            problems.append(f"{where}.id {message_id!r} is used twice")
        else:
            seen.add(normalized_text(message_id))


def _nesting(value: Any) -> int:
    """How deep ``value`` nests (a scalar 0, ``[]`` 1, ``{"a": []}`` 2), counted without
    recursion (a deep value must not exhaust the stack it is checked to protect), and no
    further than one level past :data:`MAX_NESTING`.

    >>> _nesting({"a": [1, [2]]}), _nesting("text")
    (3, 0)
    """
    deepest, pending = 0, [(value, 1)]
    while pending and deepest <= MAX_NESTING:
        item, level = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level)
            pending.extend((child, level + 1) for child in children)
    return deepest


def parse_session_document(data: Any) -> SessionFile:
    """Validate a decoded session document; :class:`SessionFileError` lists every problem."""
    if not isinstance(data, dict):
        raise SessionFileError(f"not a valid session file: the top level must be a JSON object, not {type(data).__name__}")
    problems: list[str] = []
    if data.get("format") != FORMAT:
        problems.append(f"format must be {FORMAT!r} (got {data.get('format')!r})")
    if data.get("version") != VERSION:
        problems.append(f"version must be {VERSION} (got {data.get('version')!r})")
    messages = data.get("messages")
    seen: set[str] = set()
    if not isinstance(messages, list):
        problems.append("messages must be a list")
        messages = []
    for index, item in enumerate(messages):
        _check_message(index, item, problems, seen)
    pinned = data.get("pinned", [])
    if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
        problems.append("pinned must be a list of message ids")
        pinned = []
    if problems:
        raise SessionFileError("not a valid session file: " + "; ".join(problems))
    loaded = tuple(_message(m) for m in messages)
    session = data.get("session")
    name = normalized_text(session) if isinstance(session, str) else ""
    return SessionFile(loaded, tuple(normalized_text(p) for p in pinned if normalized_text(p) in seen), name)


def _message(item: dict[str, Any]) -> Message:
    """The message of a checked ``messages`` item (:func:`_check_message`)."""
    parts = item.get("parts")
    return Message(
        normalized_text(item.get("id") or new_message_id()),
        item["role"],
        normalized_text(item["content"]),
        parts=None if parts is None else tuple(parts),
        metadata=dict(item.get("metadata") or {}),
    )


def read_session_file(path: str | os.PathLike[str]) -> SessionFile:
    """Read and validate a session file; :class:`SessionFileError` says why it cannot be used."""
    source = Path(path).expanduser()
    try:
        with _open_regular(source, "/load") as file:
            data = file.read(MAX_BYTES + 1)  # never more: a file may grow while it is read
        if len(data) > MAX_BYTES:
            raise SessionFileError(f"{source} is larger than {MAX_BYTES} bytes; not loaded")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SessionFileError(f"cannot read {source}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SessionFileError(f"{source} is not JSON ({exc}); nothing was loaded") from exc
    except RecursionError:  # the decoder recurses per level: too deep for any message anyway
        raise SessionFileError(
            f"{source} is nested too deeply to read (messages' parts and metadata may nest at most "
            f"{MAX_NESTING} levels); nothing was loaded"
        ) from None
    try:
        return parse_session_document(data)
    except SessionFileError as exc:
        raise SessionFileError(f"{source}: {exc}; nothing was loaded") from None
