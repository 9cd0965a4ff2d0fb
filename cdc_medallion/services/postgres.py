"""A throwaway PostgreSQL cluster for capture tests, from Debian's `postgresql` package.

Debezium reads PostgreSQL's logical replication stream, so the capture test needs a real server
with `wal_level=logical`, not the system cluster (which may hold someone's data, and runs with
`replica`). `initdb` makes a cluster in a temporary folder, started on a free loopback port with
its socket in that folder; nothing outside it is touched. PostgreSQL refuses to run as root, so
when we are root the server runs as the `postgres` system user, which owns the folder.

Statements go through `psql` (Debian ships it with the server), so the tests need no Python
driver: one `psql` call per transaction, `ON_ERROR_STOP` so a failed statement fails the test.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from cdc_medallion.services.process import free_port

BIN = Path(os.environ.get("CDC_MEDALLION_PG_BIN", "/usr/lib/postgresql/15/bin"))
SUPERUSER = "postgres"
DATABASE = "shop"


class Unavailable(RuntimeError):
    """PostgreSQL cannot run here (not installed, or no unprivileged user to run it as)."""


class PostgresCluster:
    """One cluster in its own folder; `close()` stops it and removes the folder."""

    def __init__(self) -> None:
        if not (BIN / "postgres").is_file():
            raise Unavailable(
                f"{BIN / 'postgres'} not found (Debian's postgresql package: `make postgres` installs it)"
            )
        self._as: list[str] = []
        owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise Unavailable("running as root and there is no `postgres` user to run the server as") from None
            runuser = shutil.which("runuser")
            if runuser is None:
                raise Unavailable("running as root and `runuser` is missing")
            self._as = [runuser, "-u", owner.pw_name, "--"]
        self.folder = Path(tempfile.mkdtemp(prefix="cdc-medallion-pg-"))
        if owner is not None:
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
        self.data = self.folder / "data"
        self.port = free_port()
        self.started = False

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def start(self, timeout: float = 60.0) -> PostgresCluster:
        """initdb (trust authentication on loopback only), then start with logical decoding on."""
        self._run(
            [str(BIN / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-sync"],
            "initdb",
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.folder}'",
            "wal_level": "logical",
            "max_wal_senders": "4",
            "max_replication_slots": "4",
            # A test cluster: small, and no fsync (its data lives as long as the test).
            "shared_buffers": "16MB",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "timezone": "'UTC'",
        }
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("".join(f"{k} = {v}\n" for k, v in settings.items()))
        log = self.folder / "server.log"
        self._run(
            [str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(log), "-w", "-t", str(int(timeout)), "start"],
            "pg_ctl start",
        )
        self.started = True
        deadline = time.monotonic() + timeout
        while self.sql("SELECT 1", database="postgres", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL did not accept connections:\n{log.read_text(errors='replace')}")
            time.sleep(0.1)
        self.sql(f"CREATE DATABASE {DATABASE}", database="postgres")
        return self

    def sql(self, script: str, database: str = DATABASE, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `script` in one session (`psql -1`: one transaction), stopping at the first error."""
        command = [
            str(BIN / "psql"),
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            self.host,
            "-p",
            str(self.port),
            "-U",
            SUPERUSER,
            "-d",
            database,
        ]
        done = subprocess.run(command, input=script, capture_output=True, text=True, env={**os.environ, "PGTZ": "UTC"})
        if check and done.returncode != 0:
            raise RuntimeError(f"psql failed ({done.returncode}): {done.stderr.strip()}\n--- script:\n{script}")
        return done

    def transaction(self, script: str) -> None:
        """`script` committed as one transaction."""
        self.sql(f"BEGIN;\n{script};\nCOMMIT;\n")

    def _run(self, command: list[str], what: str) -> None:
        done = subprocess.run([*self._as, *command], capture_output=True, text=True, cwd=self.folder)
        if done.returncode != 0:
            raise Unavailable(f"{what} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")

    def close(self) -> None:
        if self.started:
            with contextlib.suppress(Unavailable):
                self._run([str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"], "pg_ctl stop")
            self.started = False
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
