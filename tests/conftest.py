"""Shared fixtures: seeded RNG, the real benchmark data (when shared/ is present)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def data_root() -> Path:
    """Real MSL / SMD-19 data, unpacked once into a cache outside the repo.

    Skips when ../shared/datasets is absent (e.g. a clone without the shared folder).
    """
    unpack = SHARED_DATASETS / "unpack.sh"
    if not unpack.is_file():
        pytest.skip(f"{SHARED_DATASETS} not present: real-data tests skipped")
    dest = Path(os.environ.get("SCJEPA_DATA", "~/.cache/scjepa/datasets")).expanduser()
    subprocess.run(["bash", str(unpack), str(dest)], check=True, capture_output=True)
    return dest
