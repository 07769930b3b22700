"""PostgreSQL connection strings: checked before anything connects, and shown without secrets.

libpq quotes the whole string it cannot parse, and a connection string may hold several
secrets (``password``, ``sslpassword``, ``oauth_client_secret``, SCRAM keys): every message,
``repr`` and pickle of a :class:`~context_gatekeeper.stores.postgres.PostgresStore` goes
through :func:`redacted` or :func:`is_secret_key`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..errors import InvalidInputError

__all__ = ["check_conninfo", "connection_settings", "is_secret_key", "redacted"]

KEEPALIVE_PROBES = 3
"""Unanswered TCP keepalive probes after which a connection counts as lost."""


def check_conninfo(dsn: str) -> None:
    """:class:`InvalidInputError` unless libpq can parse ``dsn``; its message never holds
    the password (libpq's own quotes the whole string)."""
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason = _without_passwords(str(exc).strip(), dsn)
        raise InvalidInputError(
            f"PostgresStore cannot read its connection string ({reason}); pass a URL such as "
            "postgresql://user:password@host:5432/dbname (percent-encode '@', ':', '/' and '[' in the user and "
            "password) or libpq key=value pairs such as 'host=... dbname=... user=...'"
        ) from None


_SECRET_KEY = re.compile(r"password|secret|\Ascram_\w*_key\Z", re.IGNORECASE)
"""libpq connection keywords whose values are secrets: ``password``, ``sslpassword`` (the
client key's passphrase), ``oauth_client_secret``, ``scram_client_key``, ``scram_server_key``."""


def is_secret_key(keyword: str) -> bool:
    """Whether a libpq connection keyword holds a secret (:data:`_SECRET_KEY`): hidden in
    ``repr``, in error messages and in what a pickle names."""
    return _SECRET_KEY.search(keyword) is not None


_URL_PASSWORD = re.compile(r"://[^/?#@]*?:(.*)@", re.DOTALL)
_KV_SECRET = re.compile(r"(?:password|secret|scram_\w*_key)\s*=", re.IGNORECASE)


def _without_passwords(text: str, dsn: str) -> str:
    """``text``, libpq's reason for refusing ``dsn``, with everything it quotes of ``dsn``
    hidden if ``dsn`` may hold a secret (``dsn`` could not be parsed, so no secret can be
    cut out of it reliably); libpq puts what it quotes in double quotes, and a secret may
    hold one too, so all from the first quote to the last goes."""
    if _URL_PASSWORD.search(dsn) or _KV_SECRET.search(dsn):
        return re.sub(r'"[^\n]*"', '"***"', text)
    return text


def redacted(conninfo: object) -> str:
    """The connection string with its secrets (:func:`is_secret_key`) shown as ``***``."""
    if not isinstance(conninfo, str):
        return "<connection string from a callable>"
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<unparsable connection string>"
    return make_conninfo("", **{k: ("***" if is_secret_key(k) else v) for k, v in parts.items() if v is not None})


def connection_settings(dsn: str, connect_timeout: float) -> dict[str, int]:
    """libpq settings for every connection a store opens from ``dsn``, derived from its
    ``connect_timeout`` (seconds), less those the user sets (:func:`_set_by_user`) in ``dsn``,
    in their environment variables (``PGCONNECT_TIMEOUT``) or in the service file section ``dsn``
    or ``PGSERVICE`` names (the user's win):

    * ``connect_timeout``: the pool's own connection attempts give up too (libpq waits for ever by
      default, and a partition swallows the connection request);
    * TCP keepalives: after ``connect_timeout`` seconds without traffic, :data:`KEEPALIVE_PROBES`
      probes ``connect_timeout / 3`` seconds apart, so a call waiting for its reply across a
      partition (or from a host that died) fails after about twice ``connect_timeout``;
    * ``tcp_user_timeout`` (libpq 12+, in ms): the same bound for a request the server never
      acknowledged.

    None of them bounds a server process that stopped answering while its host's network stack
    still does (the kernel acknowledges the request and answers the probes): see the stores guide."""
    seconds = max(1, round(connect_timeout))  # whole seconds; 0 would mean no limit
    settings = {"connect_timeout": seconds, "keepalives": 1, "keepalives_idle": seconds,
                "keepalives_interval": max(1, round(connect_timeout / KEEPALIVE_PROBES)),
                "keepalives_count": KEEPALIVE_PROBES}
    if psycopg.pq.version() >= 120000:
        settings["tcp_user_timeout"] = 2 * seconds * 1000
    given = _set_by_user(dsn)
    return {key: value for key, value in settings.items() if key not in given}


def _set_by_user(dsn: str) -> set[str]:
    """The libpq keywords the user sets for connections to ``dsn``: in ``dsn``, in their
    environment variables, or in the service file section the connection uses (``service=`` in
    ``dsn``, else ``PGSERVICE``).  A ``service=`` section found in neither file Python can locate
    (it may be in the system folder libpq was built with, such as ``/etc/postgresql-common``)
    counts as setting none of them: the protections the store derives stay on rather than being
    dropped on a guess (name the service with ``PGSERVICE``, which libpq itself resolves, to
    have such a section's settings win).

    Without ``service=`` in ``dsn``, libpq itself answers (``PQconndefaults`` reads the
    environment and ``PGSERVICE``'s section); none of the keywords the store derives has a
    compiled-in default, so a value there was set by the user."""
    parts = conninfo_to_dict(dsn)
    defaults = psycopg.pq.Conninfo.get_defaults()
    service = parts.get("service")
    if service is None:
        return set(parts) | {option.keyword.decode() for option in defaults if option.val is not None}
    section = _service_section(str(service), parts.get("servicefile")) or set()
    from_environment = {option.keyword.decode() for option in defaults
                        if option.envvar is not None and os.fsdecode(option.envvar) in os.environ}
    return set(parts) | from_environment | section


def _service_section(service: str, servicefile: object) -> set[str] | None:
    """The keywords section ``[service]`` sets in the first service file that holds it, searched as
    libpq does: the user's (``servicefile``, else ``PGSERVICEFILE``, else ``~/.pg_service.conf``;
    ``%APPDATA%\\postgresql\\.pg_service.conf`` on Windows), then ``pg_service.conf`` in
    ``PGSYSCONFDIR``.  None when neither holds it (libpq's default system folder is compiled in)."""
    user = servicefile or os.environ.get("PGSERVICEFILE") or _home_service_file()
    system = os.environ.get("PGSYSCONFDIR")
    for path in (str(user), os.path.join(system, "pg_service.conf") if system else None):
        section = _section_keys(path, service) if path else None
        if section is not None:
            return section
    return None


def _home_service_file() -> str:
    """Where libpq looks for the user's service file when ``PGSERVICEFILE`` is not set."""
    if os.name == "nt":
        return os.path.join(os.environ.get("APPDATA", ""), "postgresql", ".pg_service.conf")
    return os.path.join(os.path.expanduser("~"), ".pg_service.conf")


def _section_keys(path: str, service: str) -> set[str] | None:
    """The keywords of the first section ``[service]`` of the service file ``path``, read as libpq
    reads it (``#`` comments, ``keyword=value`` lines); None if the file has no such section or
    cannot be read."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    keys: set[str] | None = None
    for line in (raw.strip() for raw in lines):
        if line.startswith("["):
            if keys is not None:
                break  # libpq stops at the section after its own
            keys = set() if line.startswith(f"[{service}]") else None
        elif keys is not None and "=" in line and not line.startswith("#"):
            keys.add(line.partition("=")[0].strip())
    return keys
