"""What the JVM services the tests and demos start have in common: a folder of their own, a
process whose output goes to a log there, a stop that is graceful first and forceful after a
timeout, and a context manager that never leaves a process or a folder behind."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's choice of an ephemeral port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends it SIGTERM when its parent dies, so a test
    run that is killed leaves no service behind (Linux; elsewhere nothing happens)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def guard() -> Callable[[], None] | None:
    """The kernel's "parent died" signal follows the thread that started the child, not the
    process: a service (re)started from a short-lived thread would be stopped when that thread
    ends. Only a start from the main thread gets the guard; `stop()` / `close()` cover the rest."""
    return _die_with_parent if threading.current_thread() is threading.main_thread() else None


def java_binary(what: str) -> str:
    java = shutil.which("java")
    if java is None:
        raise FileNotFoundError(f"java is needed to run {what} (Java 17 or later)")
    return java


class JavaService:
    """One JVM process run from a classpath, logging to `log_file` in `folder`.

    Subclasses write their configuration into `folder`, call `launch` from `start`, and wait
    there until the service serves."""

    LOG_NAME = "service.log"

    def __init__(self, folder: Path, owns_folder: bool) -> None:
        self.folder = folder
        self._owns_folder = owns_folder
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.folder / self.LOG_NAME

    def start(self) -> Self:
        raise NotImplementedError

    def launch(self, java_options: Sequence[str], log4j: str, classpath: Sequence[str], main: Sequence[str]) -> None:
        """Start `java <options> -cp <classpath> <main...>`, its output appended to the log."""
        java = java_binary(type(self).__name__)
        logging = self.folder / "log4j2.properties"
        logging.write_text(log4j, encoding="utf-8")
        command = [
            java,
            *java_options,
            f"-Dlog4j2.configurationFile={logging}",
            "-cp",
            os.pathsep.join(classpath),
            *main,
        ]
        self.spawn(command)

    def spawn(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Start `command` (a JVM, or a script that execs one), its output appended to the log."""
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=guard(),  # async-signal-safe: one prctl call before exec
            )

    def exited(self) -> bool:
        return self.process is None or self.process.poll() is not None

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_file.read_text(encoding="utf-8", errors="replace") if self.log_file.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        """A controlled shutdown (SIGTERM); SIGKILL if it takes longer than `timeout`."""
        if self.exited():
            return
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """The process dies at once, as in a crash (its folder stays for the next `start`)."""
        if not self.exited():
            assert self.process is not None
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        """Stop, and remove the folder if this service made it."""
        self.stop()
        if self._owns_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
