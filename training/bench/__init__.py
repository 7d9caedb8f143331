"""Benchmarks of the hot paths (``scjepa bench train | infer | serve``) and the HTTP
load generator that ``bench serve`` drives the running service with.

May import everything else in the project: it measures it from outside.
"""


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), for the JSON of a run."""
    from pathlib import Path

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
