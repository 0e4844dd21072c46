"""A throwaway PostgreSQL server on loopback, for the tests of searches sharing one database.

``python tests/pgserver.py start DIR`` initialises a cluster in DIR, starts it on a free
127.0.0.1 port and prints its URL; ``stop DIR`` stops it. The tests use ``start``/``stop``
from Python when $GEMMTUNE_TEST_POSTGRES does not already name a server. Debian's packages put
the server programs under /usr/lib/postgresql/VERSION/bin; PostgreSQL refuses to run as root,
so as root the cluster belongs to the ``postgres`` user the packages create.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path


class Unavailable(Exception):
    """No server can be started here; the message says why."""


def _program(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise Unavailable(f"no PostgreSQL server programs ({name}) found: apt-get install postgresql")
    return found


def _as_owner(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser") is None:
        raise Unavailable("running as root without runuser to start PostgreSQL as another user")
    return ["runuser", "-u", "postgres", "--", *command]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(directory: str | Path) -> str:
    """Start a server with its data in ``directory``; returns a SQLAlchemy URL of its database."""
    directory = Path(directory).resolve()
    data = directory / "data"
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres")
    port = _free_port()
    try:
        subprocess.run(_as_owner([_program("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                                  "--no-sync"]), check=True, capture_output=True, text=True)
        subprocess.run(_as_owner([_program("pg_ctl"), "-D", str(data), "-l", str(directory / "server.log"), "-w",
                                  "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {directory} -c fsync=off",
                                  "start"]), check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        said = (e.stderr or e.stdout or "").strip().splitlines()
        raise Unavailable(f"starting PostgreSQL failed: {said[-1] if said else e}") from None
    except (OSError, KeyError, LookupError) as e:
        raise Unavailable(f"cannot start PostgreSQL: {e}") from None
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


def stop(directory: str | Path) -> None:
    data = Path(directory).resolve() / "data"
    subprocess.run(_as_owner([_program("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                   capture_output=True, text=True)


if __name__ == "__main__":
    what, where = sys.argv[1:3]
    try:
        print(start(where) if what == "start" else stop(where) or "stopped")
    except Unavailable as e:
        sys.exit(f"pgserver: {e}")
