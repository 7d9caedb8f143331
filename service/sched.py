"""The event loop's CPU time slice (Linux 6.12+ EEVDF, ``sched_setattr(2)``): a waking
thread with a shorter slice preempts a running one with a longer slice, so with a short
slice a request runs on arrival instead of after the running batch's slice, and unlike
nice no thread's CPU share changes.

Measured in paired runs (docs/notebook/benchmarks.md, "CPU time slices"): the loop's
0.1 ms slice (``SCJEPA_LOOP_SLICE_US``, default 100) lowered GET /risk p99 in 5 of 5
pairs. A 50 ms slice for the inference thread on top was mixed: lower in a 3-pair trial,
higher in 2 of 2 pairs with the service pinned to one core, where a loop that has used
its share waits out the whole batch slice. So only the loop asks; the inference thread
is put back on the kernel's default (a thread inherits its creator's slice). Older
kernels ignore the field: the applied value is read back and logged, never assumed.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import struct
import sys

# sched_setattr / sched_getattr syscall numbers
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
# struct sched_attr (SCHED_ATTR_SIZE_VER1): size, policy, flags, nice, priority,
# runtime, deadline, period (ns), util_min, util_max
_ATTR = struct.Struct("IIQiIQQQII")
_FAIR = (0, 3)  # SCHED_OTHER, SCHED_BATCH: the policies with a slice to ask for
MIN_US, MAX_US = 100, 100_000  # the kernel's clamp


def _syscalls() -> tuple[int, int] | None:
    if sys.platform != "linux":
        return None
    return _SYSCALLS.get(platform.machine())


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def check_us(us: int) -> int:
    """``us`` if it is a slice the kernel takes (0 = its default), else ValueError."""
    if us != 0 and not MIN_US <= us <= MAX_US:
        raise ValueError(f"slice {us} µs: 0 (kernel default) or {MIN_US}..{MAX_US} µs")
    return us


def _get_attr() -> tuple[int, ...] | None:
    nrs = _syscalls()
    if nrs is None:
        return None
    buf = ctypes.create_string_buffer(_ATTR.size)
    if _libc().syscall(nrs[1], 0, buf, _ATTR.size, 0) != 0:
        return None
    return tuple(_ATTR.unpack(buf.raw))


def get_slice_us() -> int | None:
    """The calling thread's requested slice in µs; None where it cannot be read.
    0 on kernels without custom slices."""
    attr = _get_attr()
    return None if attr is None else int(attr[5] // 1000)


def set_slice_us(us: int) -> int | None:
    """Ask for a ``us`` µs slice for the calling thread (0 = the kernel's default).

    The thread's policy and nice are kept (no privilege needed). Returns the slice read
    back afterwards (``us`` where the kernel supports custom slices), or None where the
    calls do not exist or fail, or the thread runs a real-time policy (another OS, a
    seccomp filter, chrt): the service runs the same, only without the latency gain.
    """
    check_us(us)
    nrs = _syscalls()
    now = _get_attr()
    if nrs is None or now is None or now[1] not in _FAIR:
        return None
    # the same policy and nice (sched_setattr sets both), only the slice changes
    attr = _ATTR.pack(_ATTR.size, now[1], 0, now[3], 0, us * 1000, 0, 0, 0, 0)
    if _libc().syscall(nrs[0], 0, ctypes.c_char_p(attr), 0) != 0:
        return None
    return get_slice_us()


def describe(requested_us: int, applied_us: int | None) -> str:
    """One line for the start-up log."""
    if requested_us == 0:
        return "kernel default"
    if applied_us == requested_us:
        return f"{applied_us / 1000:g} ms"
    if applied_us is None:
        return f"{requested_us / 1000:g} ms requested, not supported on {platform.system()} {platform.machine()}"
    return f"{requested_us / 1000:g} ms requested, kernel ignores custom slices (before 6.12)"
