"""One error hierarchy for the whole library.

Every error subclasses :class:`GatekeeperError` *and* the built-in exception it
behaves like, so ``except ValueError`` and ``except KeyError`` keep working in
code that does not know this library.  Messages say what went wrong and what to
do about it.
"""

from __future__ import annotations

import functools
import itertools
import json
import shlex

__all__ = [
    "GatekeeperError",
    "BudgetError",
    "InvalidInputError",
    "InvalidTypeError",
    "UnknownTurnError",
    "UnknownMessageError",
    "EditError",
    "TruncatedReplyError",
    "FilteredReplyError",
    "StructuredOutputError",
    "HistoryError",
    "StaleHeadError",
    "ModelUnavailableError",
    "MissingExtraError",
    "SchemaVersionError",
    "InvalidRevisionError",
    "CorruptLogError",
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "StoreCapabilityError",
    "ServerStartError",
]


class GatekeeperError(Exception):
    """Root of every error raised by context-gatekeeper."""


class BudgetError(GatekeeperError, ValueError):
    """A token budget is invalid, or pinned content alone does not fit in it."""


class InvalidInputError(GatekeeperError, ValueError):
    """Input of the right type but an unusable value: an empty or whitespace-only
    message or query, a setting out of its range, an unknown option name."""


class InvalidTypeError(GatekeeperError, TypeError):
    """An argument of the wrong type: a class where an instance is needed, a string
    where a list is, a model or store this library cannot use."""


class UnknownTurnError(GatekeeperError, KeyError):
    """A turn id that was never issued, or that has been removed."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence readable.
        return str(self.args[0]) if self.args else "unknown turn"


class UnknownMessageError(GatekeeperError, KeyError):
    """A message id that is not part of the transcript."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown message"


class EditError(GatekeeperError, ValueError):
    """A model's edit could not be used (malformed or invalid after one retry)."""


class TruncatedReplyError(EditError):
    """A model stopped at its output limit (finish reason ``length`` / ``MAX_TOKENS``).

    Attributes:
        partial: what the model returned before it was cut off (text, or a parsed object).
        finish_reason: the finish reason the model reported.
    """

    def __init__(self, message: str, *, partial: object = "", finish_reason: str | None = None) -> None:
        super().__init__(message)
        self.partial = partial
        self.finish_reason = finish_reason


class FilteredReplyError(EditError):
    """The provider stopped the model's answer for its safety or content policy.

    Not retried: the same request meets the same policy.  Nothing was changed.

    Attributes:
        partial: what the model returned with that finish reason (text, or a parsed object):
            never applied as an edit; a chat may show it as the answer it was.
        finish_reason: the finish reason the model reported (``content_filter``, ``SAFETY`` ...).
    """

    def __init__(self, message: str, *, partial: object = "", finish_reason: str | None = None) -> None:
        super().__init__(message)
        self.partial = partial
        self.finish_reason = finish_reason


class StructuredOutputError(EditError):
    """A model's structured-output path failed: unsupported, raised, or returned nothing.

    An edit does not stop here: it asks the same model again for plain JSON text,
    within its attempt budget (see :mod:`context_gatekeeper.editing.compute`).

    Attributes:
        reached_model: whether the model was called (a failure while binding the
            schema, before any call, costs the edit no attempt).
    """

    def __init__(self, message: str, *, reached_model: bool = True) -> None:
        super().__init__(message)
        self.reached_model = reached_model

    def __reduce__(self) -> tuple[object, ...]:
        return (_structured_output_error, (str(self), self.reached_model))


def _structured_output_error(message: str, reached_model: bool) -> "StructuredOutputError":
    return StructuredOutputError(message, reached_model=reached_model)


class HistoryError(GatekeeperError, ValueError):
    """A version operation that cannot be done: nothing to undo or redo, an unknown revision."""


class StaleHeadError(GatekeeperError):
    """A concurrent change landed first; reload and try again."""


class ModelUnavailableError(GatekeeperError, RuntimeError):
    """No model could be reached: missing API key, network failure or timeout."""


class StoreError(GatekeeperError):
    """Root of the errors a store raises about its storage: corrupt, closed, too new,
    unavailable, or lacking a capability.  ``except StoreError`` catches them all."""


class StoreUnavailableError(StoreError, OSError):
    """The storage cannot be used right now: locked or busy beyond the timeout, disk full,
    an I/O error, a file that cannot be opened or is damaged, a server that cannot be
    reached.  Nothing was written by the operation that raised it.  The message says what
    happened and what to do; the driver's own error is ``__cause__``.  Code that caught the
    driver's class (``sqlite3.OperationalError``, ``psycopg.OperationalError``) should catch
    this one (an ``OSError``)."""


class StoreCapabilityError(StoreError, TypeError):
    """A store lacks a capability the call needs (a keyword its ``commit`` does not take,
    a method it does not have); the message names the capability and what to do."""


class SchemaVersionError(StoreError, RuntimeError):
    """A store's schema does not match this version: migrated by a newer one (upgrade
    context-gatekeeper), or not set up or migrated yet where this store may not do it
    (``setup=False``, ``read_only``: run ``setup()``); the message says which."""


class InvalidRevisionError(GatekeeperError, ValueError):
    """A revision that does not apply to the log it would follow (a message put twice,
    removed or changed while absent, an id reused); the store wrote nothing."""


class CorruptLogError(StoreError, RuntimeError):
    """A stored revision cannot be read or replayed.

    Attributes:
        session_id: the session whose log it is.
        revision: the first revision that fails; every revision before it is intact
            and ``store.truncate(session_id, revision - 1)`` keeps exactly those.
    """

    def __init__(self, session_id: str, revision: int, reason: str) -> None:
        self.session_id, self.revision, self.reason = session_id, revision, reason
        super().__init__(
            f"session {session_id!r}: revision {revision} cannot be loaded ({reason}). Revisions "
            f"1..{revision - 1} are intact: store.truncate({session_id!r}, {revision - 1}) keeps them "
            "and sets the rest aside (see Store.truncate), after which the session opens again"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.session_id, self.revision, self.reason))


class StoreClosedError(StoreError, RuntimeError):
    """The store was closed; open a new one (on the same file or database) to go on."""


class ServerStartError(GatekeeperError, RuntimeError):
    """A local server (the web chat) did not start listening in time; the message says how
    long it waited.  Nothing is left running."""


class MissingExtraError(GatekeeperError, ModuleNotFoundError):
    """An optional dependency is not installed (or too old to import); the message names
    the extra that installs it, as :meth:`install_command` writes it.

    Attributes:
        extra: the extra to install.
        name: the module that could not be imported, as on ``ModuleNotFoundError``.
    """

    def __init__(self, message: str, *, extra: str, name: str | None = None) -> None:
        super().__init__(message, name=name)
        self.extra = extra

    @classmethod
    def of_framework(
        cls, missing: ImportError, *, adapter: str, needs: str, extra: str, packages: frozenset[str],
        floors: dict[str, str] | None = None,
    ) -> "MissingExtraError | None":
        """The error an adapter raises when importing its framework failed with ``missing``
        (naming the extra that installs it), or ``None`` when the module is not one of the
        framework's top-level ``packages`` (a broken install of the adapter itself, which must
        come through as it is).  A module not found is not installed; a name not found in a
        framework module is, where an installed distribution is below its ``floors`` entry
        (distribution -> lowest version the adapter supports), a version too old, and
        otherwise versions that do not fit together: the message says which."""
        if (missing.name or "").partition(".")[0] not in packages:
            return None
        what = "" if isinstance(missing, ModuleNotFoundError) else _version_advice(floors or {})
        return cls(
            f"{adapter} needs {needs}, and importing it failed: {missing}. {what}"
            f"Install the extra: {cls.install_command(extra)}",
            extra=extra,
            name=missing.name,
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (_missing_extra_error, (str(self), self.extra, self.name))

    @staticmethod
    def install_command(extra: str) -> str:
        """The command that installs ``extra`` for this installation of the library, from
        where it was installed (PEP 610's ``direct_url.json``): the folder of a checkout
        (``pip install -e ".[dev]"``, as the README says), else the wheel, archive or
        repository URL it came from; by its name only when it came from an index (pip
        would look the name up on one otherwise, where the package may not be published)."""
        source = _installed_from()
        if source is None:
            return f'pip install "context-gatekeeper[{extra}]"'
        where, kind = source
        if kind == "url":  # a wheel, an archive or a repository: a direct reference to it
            return f"pip install {shlex.quote(f'context-gatekeeper[{extra}] @ {where}')}"
        return f"pip install {'-e ' if kind == 'editable' else ''}{shlex.quote(f'{where}[{extra}]')}"


@functools.lru_cache(maxsize=1)
def _installed_from() -> tuple[str, str] | None:
    """Where this distribution was installed from (its ``direct_url.json``, PEP 610):
    ``(folder, "editable" or "folder")`` for a local folder, ``(url, "url")`` for a wheel,
    an archive or a repository (``git+https://...@commit``), ``None`` for an index or when
    unknown.  Never raises: it only words advice."""
    try:
        from importlib import metadata
        from urllib.parse import unquote, urlparse

        # (a checkout may also hold a build's egg-info without it: the installed record is read)
        texts = (d.read_text("direct_url.json") for d in metadata.distributions(name="context-gatekeeper"))
        text = next((t for t in texts if t), None)
        if text is None:
            return None
        info = json.loads(text)
        url = urlparse(info["url"])
        if "dir_info" in info:
            if url.scheme != "file":
                return None
            return unquote(url.path), "editable" if info["dir_info"].get("editable") else "folder"
        # a package in a subfolder of the repository or archive: pip must be told where
        subdirectory = f"#subdirectory={info['subdirectory']}" if info.get("subdirectory") else ""
        if "vcs_info" in info:
            vcs = info["vcs_info"]
            commit = f"@{vcs['commit_id']}" if vcs.get("commit_id") else ""
            where = info["url"]
            if url.scheme == "file" and not url.netloc:  # pip takes a local repository as file://localhost/...
                where = f"file://localhost{url.path}"
            return f"{vcs['vcs']}+{where}{commit}{subdirectory}", "url"
        if "archive_info" in info:
            return f"{info['url']}{subdirectory}", "url"
        return None
    except Exception:  # noqa: BLE001 - not installed as a distribution, or odd metadata
        return None


def _version_advice(floors: dict[str, str]) -> str:
    """What to do about a framework name that cannot be imported: upgrade what is below its
    floor, else say the installed versions do not fit together.  Never raises: a broken
    install (a ``dist-info`` without metadata) is exactly when this runs."""
    try:
        installed = _installed(floors)
        old = [f"{dist} {have} is installed and the adapter needs >= {floors[dist]}"
               for dist, have in installed.items() if _release(have) < _release(floors[dist])]
    except Exception:  # noqa: BLE001 - advice only: the error itself must come through
        installed, old = {}, []
    if old:
        return f"{'; '.join(old)}: upgrade it. "
    shown = f" ({', '.join(f'{dist} {have}' for dist, have in installed.items())})" if installed else ""
    return f"The installed versions{shown} do not fit together or are not supported yet; upgrade them together. "


def _installed(floors: dict[str, str]) -> dict[str, str]:
    """The installed version of each distribution in ``floors`` that has readable metadata."""
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in floors:
        try:
            version = metadata.version(dist)
        except Exception:  # noqa: BLE001 - not installed, or its metadata unreadable
            continue
        if isinstance(version, str) and version:
            out[dist] = version
    return out


_PRE_RELEASE = ("a", "b", "c", "rc", "alpha", "beta", "pre", "preview", "dev")


def _release(version: str) -> tuple[int, tuple[int, ...], int]:
    """``(epoch, release, final)`` of a PEP 440 version, for comparing it with a floor:
    the release numbers padded to six places ("1" = "1.0"), and ``final`` 0 for an
    alpha, beta, candidate or dev build of that release (below it), 1 otherwise; a local
    label or post release ("1.2.13+cpu", ".post1") counts as the release."""
    text = version.strip().lower().lstrip("v")
    epoch = 0
    if "!" in text:
        head, text = text.split("!", 1)
        epoch = int(head) if head.isdigit() else 0
    text = text.split("+", 1)[0]
    numbers: list[int] = []
    rest = ""
    for i, part in enumerate(text.split(".")):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            rest = ".".join(text.split(".")[i:])
            break
        numbers.append(int(digits))
        if len(digits) < len(part):
            rest = part[len(digits):] + "." + ".".join(text.split(".")[i + 1:])
            break
    label = rest.lstrip("-_.")
    final = 0 if any(label.startswith(p) for p in _PRE_RELEASE) else 1
    return epoch, tuple(numbers + [0] * (6 - len(numbers)))[:6], final


def _missing_extra_error(message: str, extra: str, name: str | None) -> "MissingExtraError":
    return MissingExtraError(message, extra=extra, name=name)
