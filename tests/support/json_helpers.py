"""Strict JSON reading for the tests: what JSON.parse, Go or a dashboard would accept."""

from __future__ import annotations

import json
from typing import Any


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON (RFC 8259)")


def strict_loads(text: str) -> Any:
    """``json.loads`` refusing NaN, Infinity and -Infinity, as strict readers do."""
    return json.loads(text, parse_constant=_refuse)
