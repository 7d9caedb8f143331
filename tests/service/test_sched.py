"""The event loop's CPU slice (service/sched.py): applied, read back, inherited (and
dropped by the inference thread), configured."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest
from pydantic import ValidationError

from service import sched
from service.batcher import inference_executor
from service.config import Settings

T = TypeVar("T")


def in_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a fresh thread, so this test's slice changes die with it."""
    out: list[T] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def custom_slices() -> bool:
    return in_thread(lambda: sched.set_slice_us(2_000)) == 2_000


needs_slices = pytest.mark.skipif(
    sys.platform != "linux" or not custom_slices(),
    reason="needs Linux 6.12+ (EEVDF custom slices)",
)


@needs_slices
def test_slice_is_applied_and_read_back() -> None:
    def run() -> tuple[int | None, int | None, int | None]:
        # the kernel's default, not one inherited from a thread an earlier app ran on
        default = sched.set_slice_us(0)
        short = sched.set_slice_us(100)
        long = sched.set_slice_us(100_000)
        return default, short, long

    default, short, long = in_thread(run)
    assert short == 100 and long == 100_000
    assert default is not None and default > 100  # the kernel's default is longer
    assert in_thread(lambda: sched.set_slice_us(0)) == default  # 0 restores it
    assert (
        in_thread(lambda: (sched.set_slice_us(300), sched.set_slice_us(0))[1])
        == default
    )


@needs_slices
def test_threads_inherit_the_slice_and_the_inference_thread_drops_it() -> None:
    def run() -> tuple[int | None, int | None]:
        sched.set_slice_us(100)  # as the event loop's thread does
        child = in_thread(sched.get_slice_us)
        pool = inference_executor()
        try:
            return child, pool.submit(sched.get_slice_us).result()
        finally:
            pool.shutdown()

    default = in_thread(lambda: sched.set_slice_us(0))
    child, infer = in_thread(run)
    assert child == 100  # inherited: why the executor sets its slice explicitly
    assert infer == default  # the kernel's, not the loop's


def test_out_of_range_slice_is_refused() -> None:
    for bad in (-1, 50, 100_001):
        with pytest.raises(ValueError, match=r"100\.\.100000"):
            sched.set_slice_us(bad)


def test_settings_name_the_bad_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCJEPA_LOOP_SLICE_US", "50")
    with pytest.raises(ValidationError) as err:
        Settings()
    assert err.value.errors()[0]["loc"] == ("loop_slice_us",)
    assert "100..100000" in str(err.value)
    monkeypatch.setenv("SCJEPA_LOOP_SLICE_US", "0")
    assert Settings().loop_slice_us == 0
    # the loop's slice is the only one: the inference thread's was measured and removed
    assert [f for f in Settings.model_fields if f.endswith("slice_us")] == [
        "loop_slice_us"
    ]


def test_describe_says_what_happened() -> None:
    assert sched.describe(0, 1400) == "kernel default"
    assert sched.describe(100, 100) == "0.1 ms"
    assert "ignores custom slices" in sched.describe(100, 0)
    assert "not supported" in sched.describe(100, None)


@needs_slices
def test_the_thread_keeps_its_nice() -> None:
    def run() -> tuple[int, int | None, int]:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, 3)
        applied = sched.set_slice_us(100)
        return 3, applied, os.getpriority(os.PRIO_PROCESS, tid)

    want, applied, nice = in_thread(run)
    assert applied == 100 and nice == want


def test_infer_nice_is_relative_to_a_niced_parent() -> None:
    """SCJEPA_INFER_NICE is N steps below the process's niceness, not an absolute
    value: under `nice -n 10`, N = 5 puts the inference thread at 15 (and N = 15 at the
    ceiling, 19), always below the event loop."""
    code = (
        "import os, threading\n"
        "from service.batcher import inference_executor\n"
        "def nice(): return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())\n"
        "for n in (5, 15):\n"
        "    ex = inference_executor(n)\n"
        "    print(nice(), ex.submit(nice).result())\n"
        "    ex.shutdown()\n"
    )
    out = subprocess.run(
        ["nice", "-n", "10", sys.executable, "-c", code],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    base = min(19, os.nice(0) + 10)  # the tests may run niced themselves
    want = [base, min(19, base + 5), base, min(19, base + 15)]
    assert [int(x) for x in out] == want
