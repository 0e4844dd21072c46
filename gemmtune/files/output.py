"""What gemmtune writes for its user: text cells safe for their format, and files written whole.

A shared results database may hold any string (a study name, a device name), and report,
bench, replay and the rest print them. Each output format has one function that makes a string
cell safe for it, and ``cells`` applies it to every string cell and column name of a table:

* ``table``: a terminal shows the text, so no control character (C0, C1, DEL) or other
  non-printable one (bidirectional overrides, zero-width and line separators) reaches it: each is
  written as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``), which also keeps a row on one line;
* ``markdown``: the same, and ``\\`` and ``|`` backslash-escaped, so that a cell cannot end
  itself and start another or forge a row, and ``< > [ ]``, so that it cannot hold HTML, a link
  or an image a renderer would fetch;
* ``csv``: printable as for a table (CSV goes to terminals too), which turns the tab, carriage
  return and NUL that OWASP and ASVS 1.2.10 list into escapes; and a cell starting with ``=``,
  ``+``, ``-`` or ``@``, or a full-width ``＝ ＋ － ＠`` (which spreadsheets in East Asian locales
  read as the same), gets a leading ``'``, so that a spreadsheet shows it as text rather than
  running it. The csv writer quotes separators and quotes.

JSON needs none of this: ``json`` and pandas escape every control character.

``write_file`` writes a file whole or not at all, and never through a link: see its docstring.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from gemmtune.errors import GemmtuneError

FORMULA_PREFIXES = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def _visible(c: str) -> str:
    return c if c.isprintable() else c.encode("unicode_escape").decode("ascii")


def table_cell(text: str) -> str:
    """``text`` for a terminal: every non-printable character as its escape (see the module)."""
    return text if text.isprintable() else "".join(map(_visible, text))


_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\|<>[]"})


def markdown_cell(text: str) -> str:
    """``text`` for a cell of a Markdown pipe table: printable, with ``\\ | < > [ ]`` escaped."""
    return table_cell(text).translate(_MARKDOWN)


def csv_cell(text: str) -> str:
    """``text`` for a CSV cell a spreadsheet may open, or a terminal show: printable, and never
    read as a formula."""
    text = table_cell(text)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


CELL = {"table": table_cell, "markdown": markdown_cell, "csv": csv_cell}


def cells(frame, fmt: str):
    """A copy of the pandas DataFrame ``frame`` with every string cell and column name made safe
    for ``fmt`` (table, markdown or csv; json is returned as it is)."""
    if fmt not in CELL:
        return frame
    safe = CELL[fmt]
    frame = frame.rename(columns=lambda c: safe(c) if isinstance(c, str) else c)
    return frame.assign(**{c: frame[c].map(lambda v: safe(v) if isinstance(v, str) else v) for c in frame.columns})


def terminal_text(text) -> str:
    """A line for the terminal made of strings from anywhere: ``table_cell`` of its text."""
    return table_cell(str(text))


# ---------------------------------------------------------------- files

STDOUT = "-"


def write_file(path: str | Path, content: str | bytes | Callable[[BinaryIO], None]) -> None:
    """Write ``content`` (text as UTF-8, bytes, or a function that writes into a binary file) to
    ``path``, whole or not at all: into a new file beside it, flushed to the disk, which then
    takes the path's place in one step (``os.replace``). If anything fails (a full disk, an
    error of ``content``'s function) the old file is left as it was and the new one removed.

    ``-`` is standard output. A path that is a symbolic link is refused (replacing the link
    would break what it is for, writing through it would write where the user did not name; so
    is ``/dev/stdout``, a link: ``-`` is standard output), and so is one that exists but is no
    regular file (a directory, a device, a FIFO), which a replace would destroy. GemmtuneError
    says which (``writable``).
    A file replaced keeps its permissions (and its owner, where that may be given); a new one
    gets the umask's, as ``open`` gives.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    if str(path) == STDOUT:
        _fill(sys.stdout.buffer, data)
        sys.stdout.buffer.flush()
        return
    path = Path(path)
    old = writable(path)
    temp = None
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            _fill(f, data)
            f.flush()
            os.fsync(f.fileno())
        if old is not None and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
            try:   # root replacing a user's file leaves it theirs; others cannot give a file away
                os.chown(temp, old.st_uid, old.st_gid)
            except PermissionError:
                pass
        os.chmod(temp, 0o666 & ~_umask() if old is None else stat.S_IMODE(old.st_mode))
        os.replace(temp, path)
        temp = None
        _sync_directory(path.parent)
    except OSError as e:
        raise GemmtuneError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        if temp is not None:
            try:
                os.unlink(temp)
            except OSError:
                pass


def writable(path: str | Path) -> os.stat_result | None:
    """What ``path`` is (None: nothing yet), if ``write_file`` may replace it; else GemmtuneError.
    A command checks its output files with this before its work, so that a refusal costs nothing."""
    path = Path(path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise GemmtuneError(f"cannot write {path}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        try:
            target = f" to {os.readlink(path)}"
        except OSError:
            target = ""
        raise GemmtuneError(f"cannot write {path}: it is a symbolic link{target}, and gemmtune writes no file "
                            "through a link: name the file itself")
    if not stat.S_ISREG(st.st_mode):
        raise GemmtuneError(f"cannot write {path}: it is not a regular file but {_kind(st.st_mode)}")
    return st


def _fill(f: BinaryIO, data) -> None:
    if callable(data):
        data(f)
    else:
        f.write(data)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable; a file system that cannot sync a directory keeps it anyway."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
