"""A throwaway PostgreSQL server for tests: Debian's package (scripts/install-postgres.sh),
one cluster per test session in a temp folder, listening on 127.0.0.1 only, with a fresh
schema per test (`pg_url`; `PgServer.create_database` for a whole database).

The cluster runs without fsync, synchronous commit or full-page writes: it is thrown away,
and tests wait on it. PostgreSQL refuses to run as root, so under root the cluster runs as
the `postgres` system user the package creates (or `nobody`), owning its temp folder.
Without the binaries the tests that need it skip, or fail when CI is set.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT = 30.0
DATABASE = "bridge_test"  # created at start; each test gets a schema of it
_BIN_GLOB = "/usr/lib/postgresql/*/bin"


def find_bin_dir() -> Path | None:
    """The newest Debian PostgreSQL's bin folder, else the folder of `initdb` on PATH."""
    found = [Path(d) for d in glob.glob(_BIN_GLOB) if (Path(d) / "initdb").exists()]
    if found:
        return max(found, key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _run_as() -> pwd.struct_passwd | None:
    """The user the cluster runs as when we are root (None: as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and there is neither a postgres nor a nobody user")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One cluster: `start()`, then `fresh_schema()` (or `create_database()`) per test,
    `stop()` at the end."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.user = _run_as()
        self.base = Path(tempfile.mkdtemp(prefix="bridge-pg-"))
        self.data = self.base / "data"
        self.log = self.base / "postgres.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)

    def _as_user(self) -> dict[str, Any]:
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def start(self) -> None:
        if self.user is not None:
            os.chown(self.base, self.user.pw_uid, self.user.pw_gid)
        subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            check=True,
            capture_output=True,
            cwd=self.base,
            **self._as_user(),
        )
        for attempt in range(3):  # the free port may be taken between the probe and the bind
            self.port = _free_port()
            if self._launch():
                self._create(DATABASE)
                return
            self._terminate()
            if attempt == 2:
                break
        raise RuntimeError(f"postgres did not start:\n{self.log.read_text(errors='replace')}")

    def halt(self) -> None:
        """Stop the server as `pg_ctl stop -m fast` does (SIGINT: every session aborted, a
        clean shutdown); its data stays for `resume`."""
        self._terminate()

    def resume(self) -> None:
        """Start the server again on the same data and port (after `halt`)."""
        if not self._launch():
            self._terminate()
            raise RuntimeError(f"postgres did not restart:\n{self.log.read_text(errors='replace')}")

    def _launch(self) -> bool:
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.base),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
        }
        args = [str(self.bin_dir / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.base,
                **self._as_user(),
            )
        return self._wait_ready()

    def _wait_ready(self) -> bool:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                return False
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        return False

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh, empty database; returns its URL (30-250 ms: a schema is much cheaper,
        see `fresh_schema`)."""
        name = f"db_{next(self._names)}"
        self._create(name)
        return self.url(name)

    def fresh_schema(self) -> str:
        """The URL of a fresh, empty schema of the test database, made the connections'
        only schema (`search_path`): as isolated as a database for the store, in 1 ms."""
        import psycopg

        name = f"test_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.url()}?options=-csearch_path%3D{name}"

    def _create(self, database: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {database} TEMPLATE template0")

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)  # fast shutdown: abort sessions, clean exit
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        try:
            self._terminate()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def require_postgres() -> Path:
    """The bin folder of PostgreSQL; skips without it (fails when CI is set)."""
    bin_dir = find_bin_dir()
    if bin_dir is not None:
        return bin_dir
    reason = "PostgreSQL is not installed (scripts/install-postgres.sh)"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL cluster for the whole session (started on first use)."""
    server = PgServer(require_postgres())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """The URL of a fresh, empty schema on the session's cluster (the store sees nothing
    else: it is the connections' only `search_path`)."""
    return pg_server.fresh_schema()
