#!/usr/bin/env python3
"""Container health check of the service images: GET /readyz of the `scjepa serve`
running in this container, on the address its own command line names.

    python /usr/local/bin/scjepa-healthcheck [--key-file PATH] [/readyz]

The image's CMD and a compose `command:` may pass any --host/--port (a host-network
deployment must pick a free port); reading them from the server's command line
(/proc/<pid>/cmdline) keeps the check on the port the service really listens on. A
wildcard bind (0.0.0.0, ::) is probed on loopback. No server process found: the
defaults of `scjepa serve` (127.0.0.1:8000). Exit 0 when ready, 1 otherwise (the
reason goes to stderr, which Docker keeps in the health log). Standard library only:
the same file serves the CPU and CUDA images.

The probe sends the ops key (X-API-Key) read from --key-file (docker compose: the
`ops_key` secret), or from /run/secrets/ops_key when that file exists, so that it
passes when SCJEPA_OPS_KEY_ROUTES puts /readyz behind an @ops key; without one it
sends no key. A --key-file that cannot be read, or is empty, fails the check (and says
so) rather than probing without the key.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

DEFAULT = ("127.0.0.1", 8000)  # scjepa serve's defaults (service/cli.py)
KEY_FILE = Path("/run/secrets/ops_key")  # docker compose's ops_key secret
WILDCARD = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1", "[::]": "::1"}


def serve_address(argv: list[str]) -> tuple[str, int] | None:
    """(host, port) a `scjepa serve` command line listens on; None for any other
    command (e.g. `python /opt/venv/bin/scjepa serve --port 9000`)."""
    names = [Path(a).name for a in argv]
    if "scjepa" not in names:
        return None
    rest = argv[names.index("scjepa") + 1 :]
    if not rest or rest[0] != "serve":
        return None
    host, port = DEFAULT
    args = iter(rest[1:])
    for arg in args:
        key, eq, value = arg.partition("=")
        if key not in ("--host", "--port"):
            continue
        if not eq:
            value = next(args, "")
        if key == "--host":
            host = value
        elif value.isdigit():
            port = int(value)
    return WILDCARD.get(host, host), port


def find_server(proc: Path = Path("/proc")) -> tuple[str, int] | None:
    """The address of the oldest `scjepa serve` process visible in /proc."""
    pids = sorted(int(p.name) for p in proc.iterdir() if p.name.isdigit())
    for pid in pids:
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:  # exited meanwhile, or not ours to read
            continue
        found = serve_address([a.decode(errors="replace") for a in raw.split(b"\0")])
        if found:
            return found
    return None


def url(address: tuple[str, int], path: str) -> str:
    host, port = address
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


def ops_key(key_file: Path | None, default: Path = KEY_FILE) -> str | None:
    """The key to send: --key-file's (which must hold one), else the default file's
    when it exists, else none. Raises OSError or ValueError when --key-file is
    unusable."""
    if key_file is None:
        if not default.is_file():
            return None
        key_file = default
    key = key_file.read_text().strip()
    if not key:
        raise ValueError(f"{key_file} is empty")
    return key


def parse_args(argv: list[str]) -> tuple[Path | None, str]:
    """(--key-file, path) from ``scjepa-healthcheck [--key-file PATH] [PATH]``."""
    key_file, path = None, "/readyz"
    args = iter(argv[1:])
    for arg in args:
        if arg == "--key-file":
            key_file = Path(next(args, ""))
        elif arg.startswith("--key-file="):
            key_file = Path(arg.partition("=")[2])
        else:
            path = arg
    return key_file, path


def main(
    argv: list[str], proc: Path = Path("/proc"), default_key: Path = KEY_FILE
) -> int:
    key_file, path = parse_args(argv)
    target = url(find_server(proc) or DEFAULT, path)
    try:
        key = ops_key(key_file, default_key)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"{target}: no ops key to send: {e}\n")
        return 1
    request = urllib.request.Request(target)
    if key is not None:
        request.add_header("X-API-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=4) as r:
            r.read()
    except Exception as e:  # any failure is "unhealthy", with its reason
        sys.stderr.write(f"{target}: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
