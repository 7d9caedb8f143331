"""Helpers of the tests that start ``scjepa serve`` as a process (fixture ``serve`` in
conftest.py), and key-file lines."""

from __future__ import annotations

import hashlib
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from support.components import require


def key_line(tenant: str, key: str) -> str:
    """A key file line: the principal and the key's SHA-256, never the key."""
    return f"{tenant} sha256:{hashlib.sha256(key.encode()).hexdigest()}\n"


def scjepa_exe() -> str:
    """This venv's `scjepa` (skipped locally, failed under CI, when not installed)."""
    return require("scjepa-cli", "tests that start `scjepa serve`")


def rss_mb(pid: int) -> float:
    """Resident set size of a process (Linux /proc), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@dataclass
class Served:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text()

    def hup(self) -> None:
        self.proc.send_signal(signal.SIGHUP)


ServeFactory = Callable[..., Served]
