"""Database URLs as people and files see them: never with a password.

A ``--db`` URL (or ``$GEMMTUNE_DB``) may carry secrets, and what gemmtune prints, logs or
exports (summaries, error messages, the exported JSON and C header) is shown to people or handed
to other programs. A URL can carry them in every way libpq or SQLAlchemy accept one:

* the userinfo, ``user:SECRET@host``, with a scheme or without (text that is not a URL at all);
* query parameters, ``?password=SECRET`` or ``?sslpassword=SECRET``: libpq's keywords holding a
  secret (and any key naming a password or a secret, whatever a driver adds);
* a libpq keyword/value string, ``host=h password=SECRET`` or ``password='SE CRET'``;
* each of these percent-encoded, or not.

``secrets`` finds all of them, ``shown`` renders a URL with each masked (the one way gemmtune
ever writes a URL out), and ``scrub`` removes them from text that did not come from gemmtune,
such as a driver's error message.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote, quote_plus, unquote, unquote_plus

MASK = "***"
DEFAULT_DB = "sqlite:///results/gemmtune.db"
DEFAULT_DB_FILE = DEFAULT_DB[len("sqlite:///"):]

_SECRET_KEY = re.compile(r"password|secret", re.IGNORECASE)
# user:secret@ at the start, after a scheme or after a blank: up to the token's last @, so that
# an unencoded @ or / in the secret does not leave its tail showing as the host or the path.
_USERINFO = re.compile(r"((?:^|://|\s)[^:/@\s]*:)(?!//)(\S*)@")
# key=secret in a query string (up to & or #) or a keyword/value string (a quoted value, or up
# to a blank).
_KEYVALUE = re.compile(r"(\b[\w.-]*(?:password|secret)[\w.-]*\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&#]*)", re.IGNORECASE)
_TOKEN = "GEMMTUNEMASKEDVALUE"   # survives SQLAlchemy's quoting of a query value unchanged


def database_url(url: str | None = None) -> str:
    """The URL in force: the argument, else $GEMMTUNE_DB, else SQLite under results/."""
    return url or os.environ.get("GEMMTUNE_DB") or DEFAULT_DB


def _parsed(url: str):
    """SQLAlchemy's URL of ``url``, or None for text it cannot parse."""
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError, TypeError):
        return None


def _may_hold_secrets(text: str) -> bool:
    # Without an @ or a key naming a secret there is nothing to mask: no need to load SQLAlchemy
    # (an error path must start fast).
    return "@" in text or _SECRET_KEY.search(text) is not None


def shown(url: str) -> str:
    """``url`` with every secret it carries masked: SQLAlchemy's rendering without the password
    and with the value of each query parameter naming a password or secret masked; text that is
    not a URL SQLAlchemy parses (or one whose host still holds an @) masked by pattern."""
    text = str(url)
    if not _may_hold_secrets(text):
        return text
    parsed = _parsed(text)
    if parsed is not None and "@" not in (parsed.host or ""):
        query = {key: _TOKEN if _SECRET_KEY.search(key) else value for key, value in parsed.query.items()}
        return parsed.set(query=query).render_as_string(hide_password=True).replace(_TOKEN, MASK)
    return _KEYVALUE.sub(rf"\1{MASK}", _USERINFO.sub(rf"\1{MASK}@", text))


def secrets(url: str | None) -> set[str]:
    """Every secret ``url`` carries, as SQLAlchemy decodes it and as it is written; empty for
    none."""
    text = str(url or "")
    if not _may_hold_secrets(text):
        return set()
    found = set()
    parsed = _parsed(text)
    if parsed is not None:
        found.add(parsed.password or "")
        found.update(v for key, values in parsed.query.items() if _SECRET_KEY.search(key)
                     for v in ([values] if isinstance(values, str) else values))
    found.update(m.group(2) for m in _USERINFO.finditer(text))
    for m in _KEYVALUE.finditer(text):
        value = m.group(2)
        found.add(value)
        if len(value) >= 2 and value[0] == value[-1] == "'":   # libpq's quoting: 'a \'b\''
            found.add(re.sub(r"\\(.)", r"\1", value[1:-1]))
    found |= {unquote(s) for s in found} | {unquote_plus(s) for s in found}
    return {s for s in found if s and s != MASK}


def password(url: str | None) -> str | None:
    """The password of ``url``'s userinfo or query (the longest secret it carries); None for
    none."""
    return max(secrets(url), key=len, default=None)


def _replace(text: str, found: set[str]) -> str:
    forms = {form for secret in found for form in (secret, quote(secret, safe=""), quote_plus(secret))}
    if not forms:
        return text
    # Escapes may be written %2f or %2F: any case matches.
    pattern = "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
    return re.sub(pattern, MASK, text, flags=re.IGNORECASE)


def scrub(text: str, url: str | None) -> str:
    """``text`` without any secret of ``url``, as written or as the URL encodes it."""
    return _replace(text, secrets(url))


def db_error(e: BaseException, url: str) -> str:
    """The first line of a database driver's error, without the secrets of ``url``."""
    lines = str(getattr(e, "orig", None) or e).strip().splitlines()
    return scrub(lines[0] if lines else type(e).__name__, url)
