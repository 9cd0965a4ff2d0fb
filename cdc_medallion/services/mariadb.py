"""A throwaway MariaDB server for capture tests, from Debian's `mariadb-server` package.

Debezium's MariaDB connector reads the binary log as a replica does, so the capture test needs a
real server writing its binlog in ROW format with full row images, not the system's server
(which may hold someone's data, and may log statements). `mariadb-install-db` makes a data
folder in a temporary folder; `mariadbd` serves it on a free loopback port with its socket
there, and `--no-defaults` keeps every option file of the machine out. Nothing outside the
folder is touched.

As root, the server runs as root (`--user=root`) rather than dropping to the `mysql` user: a
process that changes its user loses the kernel's "parent died" signal (`process.guard`), and
with it the promise that a killed test run leaves no server behind. It listens on 127.0.0.1
only, in a folder only root can write.

Statements go through the `mariadb` client (Debian ships it with the server), so the tests need
no Python driver: one client call per script, which stops at the first failed statement.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from cdc_medallion.services.process import free_port, guard

SERVER = Path(os.environ.get("CDC_MEDALLION_MARIADBD", "/usr/sbin/mariadbd"))
DATABASE = "shop"
# The account Debezium connects as, with the privileges its MariaDB connector's documentation
# lists (the snapshot reads and locks tables; streaming reads the binlog as a replica).
CAPTURE_USER = "debezium"
CAPTURE_PASSWORD = "debezium"  # a throwaway server on loopback: not a secret
CAPTURE_GRANTS = "SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, REPLICATION CLIENT"
# The server's (and the binlog reader's) server id; each connector needs another one.
SERVER_ID = 1


class Unavailable(RuntimeError):
    """MariaDB cannot run here (not installed, or it does not start)."""


class MariaDBServer:
    """One server on its own data folder; `close()` stops it and removes the folder."""

    def __init__(self) -> None:
        if not SERVER.is_file():
            raise Unavailable(f"{SERVER} not found (Debian's mariadb-server package: `make mariadb` installs it)")
        tools = {name: shutil.which(name) for name in ("mariadb-install-db", "mariadb")}
        missing = [name for name, path in tools.items() if path is None]
        if missing:
            raise Unavailable(f"{', '.join(missing)} not found (Debian's mariadb-server package installs them)")
        self._install_db, self._client = str(tools["mariadb-install-db"]), str(tools["mariadb"])
        self._user = ["--user=root"] if os.geteuid() == 0 else []
        self.folder = Path(tempfile.mkdtemp(prefix="cdc-medallion-mariadb-"))
        self.data = self.folder / "data"
        self.socket = self.folder / "mariadb.sock"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def log_file(self) -> Path:
        return self.folder / "server.log"

    def _server_options(self) -> list[str]:
        """What every run of `mariadbd` (bootstrap included) shares: the folder, and durability
        off (the data lives as long as the test)."""
        return [
            "--no-defaults",
            f"--datadir={self.data}",
            *self._user,
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-doublewrite=0",
        ]

    def start(self, timeout: float = 60.0) -> MariaDBServer:
        """Install the system tables, start the server with a ROW binlog, wait until it accepts
        connections, then create the database and the capture account."""
        self._run(
            [
                self._install_db,
                *self._server_options(),
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            "mariadb-install-db",
        )
        command = [
            str(SERVER),
            *self._server_options(),
            f"--port={self.port}",
            f"--socket={self.socket}",
            f"--bind-address={self.host}",
            "--skip-name-resolve",
            f"--pid-file={self.folder / 'mariadbd.pid'}",
            f"--log-error={self.log_file}",
            f"--log-bin={self.data / 'binlog'}",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            f"--server-id={SERVER_ID}",
            "--sync-binlog=0",
            # TIMESTAMP values are read and written as UTC, as Debezium reports them.
            "--default-time-zone=+00:00",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_bin",
        ]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            preexec_fn=guard(),  # async-signal-safe: one prctl call before exec
        )
        deadline = time.monotonic() + timeout
        while self.sql("SELECT 1", database=None, check=False).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                reason = f"mariadbd did not start (exit {self.process.poll()}):\n{self.log_tail()}"
                self.close()
                raise Unavailable(reason)
            time.sleep(0.1)
        self.sql(
            f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;"
            f" CREATE USER '{CAPTURE_USER}'@'{self.host}' IDENTIFIED BY '{CAPTURE_PASSWORD}';"
            f" GRANT {CAPTURE_GRANTS} ON *.* TO '{CAPTURE_USER}'@'{self.host}';",
            database=None,
        )
        return self

    def sql(self, script: str, database: str | None = DATABASE, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `script` in one session of the `mariadb` client as root, stopping at the first
        error; the output is tab-separated rows without a header (`--batch --skip-column-names`)."""
        command = [
            self._client,
            "--no-defaults",
            f"--socket={self.socket}",
            "--user=root",
            "--batch",
            "--skip-column-names",
            "--default-character-set=utf8mb4",
            *([database] if database else []),
        ]
        done = subprocess.run(command, input=script, capture_output=True, text=True, encoding="utf-8")
        if check and done.returncode != 0:
            raise RuntimeError(f"mariadb failed ({done.returncode}): {done.stderr.strip()}\n--- script:\n{script}")
        return done

    def transaction(self, script: str) -> None:
        """`script` committed as one transaction (a DDL statement in it commits on its own)."""
        self.sql(f"START TRANSACTION;\n{script};\nCOMMIT;\n")

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_file.read_text(encoding="utf-8", errors="replace") if self.log_file.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def _run(self, command: list[str], what: str) -> None:
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.folder)
        if done.returncode != 0:
            raise Unavailable(f"{what} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}")

    def close(self) -> None:
        """Stop the server (SIGTERM is its clean shutdown; SIGKILL after 30 s) and remove the folder."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> MariaDBServer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
