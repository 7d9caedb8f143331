"""Benchmarks of the hot paths (``scjepa bench train | infer | serve``) and the HTTP
load generator that ``bench serve`` drives the running service with.

May import everything else in the project: it measures it from outside.

Every bench's JSON records the machine it ran on (:func:`machine`: CPU model, cores,
the load average before and after, the commit), the baseline it compares with and the
ratio. The helpers below check the options before any work starts, so a bad value, a
missing artifact or an unwritable ``--json`` is one line naming the option, not a
traceback at the end of a long run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), for the JSON of a run."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine() -> dict[str, Any]:
    """What a result needs to be compared with another: the CPU model, the cores, the
    load average (as `uptime` prints it) at the start, and the commit measured."""
    from training.evaluate.results import git_commit

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_before": list(os.getloadavg()),
        "commit": git_commit(),
    }


def load_after() -> list[float]:
    return list(os.getloadavg())


def _number(kind: type, text: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number")
    return value


def _at_least(kind: type, lo: float, strict: bool, what: str) -> Any:
    """An argparse type: a ``kind`` (finite) at least ``lo`` (above it if ``strict``);
    argparse names the option and exits 2."""

    def check(text: str) -> Any:
        value = _number(kind, text)
        if value < lo or (strict and value == lo):
            raise argparse.ArgumentTypeError(f"{text}: must be {what}")
        return kind(value)

    return check


positive_int = _at_least(int, 1, False, "at least 1")
nonneg_int = _at_least(int, 0, False, "0 or more")
positive_float = _at_least(float, 0, True, "more than 0")
nonneg_float = _at_least(float, 0, False, "0 or more")


def check_json(path: Path | None, option: str = "--json") -> None:
    """Refuse, before the run, a ``--json`` path that cannot be written: its folder is
    made (as the write would), the path must not be a folder, the folder writable."""
    from training.errors import UserError

    if path is None:
        return
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder, not a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"{option} {path}: cannot make its folder ({e.strerror or e})"
        ) from None
    if not os.access(path.parent, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        raise UserError(f"{option} {path}: not writable")


def write_json(path: Path, obj: Any, option: str = "--json", indent: int = 1) -> None:
    """Write the results as strict JSON (a figure not measured, NaN, is null); an
    error is one line naming the option."""
    from training import strict_json
    from training.errors import UserError

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(strict_json.dumps(obj, indent=indent) + "\n")
    except OSError as e:
        raise UserError(f"{option} {path}: cannot write ({e.strerror or e})") from None


def read_manifest(
    artifact: Path, need: tuple[str, ...] = ("n_channels",), option: str = "--artifact"
) -> dict[str, Any]:
    """The artifact's manifest.json (with the keys ``need``), or one line naming the
    option."""
    from training.errors import UserError

    path = artifact / "manifest.json"
    if not path.is_file():
        raise UserError(
            f"{option} {artifact}: no manifest.json (an exported artifact folder)"
        )
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(
            f"{option} {artifact}: manifest.json unreadable ({e})"
        ) from None
    missing = (
        [k for k in need if k not in manifest] if isinstance(manifest, dict) else need
    )
    if missing:
        raise UserError(
            f"{option} {artifact}: manifest.json lacks {', '.join(missing)}"
        )
    return manifest


def service_env(items: list[str], option: str = "--service-env") -> dict[str, str]:
    """``SCJEPA_X=VALUE`` settings as a dict; one without ``=`` is refused."""
    from training.errors import UserError

    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"{option} {item!r}: expected SCJEPA_X=VALUE")
        out[key] = value
    return out
