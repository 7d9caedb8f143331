"""Strict JSON (RFC 8259) for every JSON file the offline side writes.

Python's json module writes ``NaN`` and ``Infinity``, which JSON.parse, Go and most
dashboards refuse. Here a non-finite float is null instead, as the manifest (pydantic)
already writes it: an undefined figure (NaN: no positives, no events) reads n/a, and a
threshold that never alerts (inf: none kept the false-alarm budget) reads +inf again
where it is compared (:func:`training.evaluate.results.served_any`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np


def json_num(v: float | None) -> float | None:
    """JSON-safe: None for a missing or undefined figure (no NaN in results.json)."""
    return float(v) if v is not None and np.isfinite(v) else None


def plain(obj: Any) -> Any:
    """``obj`` with numpy arrays and scalars as Python's, tuples as lists and every
    non-finite float None; dicts keep their key order."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray | np.generic):
        return plain(obj.tolist())
    if isinstance(obj, float):
        return json_num(obj)
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`plain` ``obj``: strict JSON, or a ValueError."""
    return json.dumps(plain(obj), allow_nan=False, **kwargs)
