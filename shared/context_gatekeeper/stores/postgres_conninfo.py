"""PostgreSQL connection strings: checked before anything connects, and shown without secrets.

libpq quotes the whole string it cannot parse, and a connection string may hold several
secrets (``password``, ``sslpassword``, ``oauth_client_secret``, SCRAM keys): every message,
``repr`` and pickle of a :class:`~context_gatekeeper.stores.postgres.PostgresStore` goes
through :func:`redacted` or :func:`is_secret_key`.
"""

from __future__ import annotations

import re

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..errors import InvalidInputError

__all__ = ["check_conninfo", "is_secret_key", "redacted"]


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
