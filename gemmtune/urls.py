"""Database URLs as people and files see them: never with the password.

A ``--db`` URL (or ``$GEMMTUNE_DB``) may carry a password, and what gemmtune prints, logs or
exports (summaries, error messages, the exported JSON and C header) is shown to people or handed
to other programs. ``shown`` renders a URL with the password masked, the one way gemmtune ever
writes a URL out; ``scrub`` removes the password from text that did not come from gemmtune,
such as a driver's error message.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote, quote_plus

MASK = "***"
DEFAULT_DB = "sqlite:///results/gemmtune.db"
DEFAULT_DB_FILE = DEFAULT_DB[len("sqlite:///"):]

# user:password@ after the scheme, for text SQLAlchemy cannot parse as a URL
_USERINFO = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def database_url(url: str | None = None) -> str:
    """The URL in force: the argument, else $GEMMTUNE_DB, else SQLite under results/."""
    return url or os.environ.get("GEMMTUNE_DB") or DEFAULT_DB


def shown(url: str) -> str:
    """``url`` with its password masked (SQLAlchemy's ``render_as_string(hide_password=True)``);
    text that is not a URL SQLAlchemy can parse loses whatever stands between ``user:`` and
    ``@``."""
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError, TypeError):
        return _USERINFO.sub(rf"\1{MASK}@", str(url))


def password(url: str | None) -> str | None:
    """The password of ``url``; None for none or for text that is not a URL."""
    if not url:
        return None
    if "@" not in str(url):   # no credentials: no need to load SQLAlchemy (an error path must start fast)
        return None
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(url).password or None
    except (sa.exc.ArgumentError, ValueError, TypeError):
        found = _USERINFO.search(str(url))
        return found.group(0)[len(found.group(1)):-1] or None if found else None


def scrub(text: str, url: str | None) -> str:
    """``text`` without the password of ``url``, as written or as the URL encodes it."""
    secret = password(url)
    if not secret:
        return text
    for form in sorted({secret, quote(secret, safe=""), quote_plus(secret)}, key=len, reverse=True):
        text = text.replace(form, MASK)
    return text


def db_error(e: BaseException, url: str) -> str:
    """The first line of a database driver's error, without the password of ``url``."""
    lines = str(getattr(e, "orig", None) or e).strip().splitlines()
    return scrub(lines[0] if lines else type(e).__name__, url)
