"""Runs the Flink peer (bench/flink_peer.py) in its own virtualenv, or says why it cannot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLINK_VENV = Path(os.environ.get("BENCH_FLINK_VENV", HERE / ".flink-venv"))
FLINK_PIN = "apache-flink==2.3.0"


@dataclass
class PeerResult:
    seconds: float | None
    error: str | None = None


def flink_python() -> Path | None:
    python = FLINK_VENV / "bin" / "python"
    return python if python.is_file() else None


def ensure_flink(say=print) -> str | None:
    """Install PyFlink into its own virtualenv once; returns why it cannot run, or None."""
    if shutil.which("java") is None:
        return "no java on PATH (Flink runs on a JVM)"
    if flink_python() is not None:
        return None
    say(f"  installing {FLINK_PIN} into {FLINK_VENV} (once)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(FLINK_VENV)], check=True)
        subprocess.run(
            [str(FLINK_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", FLINK_PIN],
            check=True,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as error:
        shutil.rmtree(FLINK_VENV, ignore_errors=True)
        tail = (error.stderr or error.stdout or "").strip().splitlines()[-1:] or [str(error)]
        return f"installing {FLINK_PIN} failed: {tail[0][:300]}"
    return None


def run_flink(fmt: str, values: Path, parallelism: int = 2, timeout: float = 3600) -> PeerResult:
    python = flink_python()
    if python is None:
        return PeerResult(None, "PyFlink is not installed")
    command = [str(python), str(HERE / "flink_peer.py"), "--format", fmt, "--input", str(values)]
    command += ["--parallelism", str(parallelism)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return PeerResult(None, f"Flink did not finish in {timeout:.0f}s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return PeerResult(None, f"Flink exited {done.returncode}: {tail[:300]}")
    return PeerResult(json.loads(lines[-1])["seconds"])
