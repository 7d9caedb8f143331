"""Generated requests, as a hostile client sends them: schemathesis against
/openapi.json (every operation, schema-valid and schema-invalid data) and hypothesis
properties of POST /ingest's validation. Every answer is below 500, documented (status
and body schema), and every 4xx body names the field or the limit.

The default run makes about 900 cases (~25 s: generating a body from the schema costs
~50 ms, answering it ~5 ms); ``pytest -m fuzz_full tests/service`` makes 10,000 or more
in ~7 minutes (docs/notebook/trust-2026-11-25.md records a run).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from service.config import Settings
from service.ingest_body import parse_ingest
from service.main import create_app
from service.schemas import STREAM_PATTERN

FLOAT32_MAX = 3.4028234663852886e38
TIMES: dict[str, tuple[int, float]] = {}  # cases and seconds per operation and mode
COUNTS: Counter[str] = Counter()  # cases run, per test (the full run asserts the sum)
# (schemathesis per operation and mode, hypothesis per property)
DEFAULT = {"ingest": 100, "other": 15, "bytes": 150, "json": 150, "bodies": 200}
FULL = {"ingest": 2500, "other": 300, "bytes": 1500, "json": 1500, "bodies": 2500}
NAMED = re.compile(
    r"SCJEPA_[A-Z_]+|X-API-Key|Content-Type|Content-Encoding|@admin|unknown stream|"
    r"unknown incident|readings reach|no route|not allowed|reload"
)


def names_field_or_limit(status: int, text: str) -> None:
    """A 4xx body: ``{"detail": ...}``, a list of errors each with a ``loc`` and a
    ``msg``, or a sentence naming the setting, header or thing refused."""
    if not 400 <= status < 500:
        return
    detail = json.loads(text)["detail"]
    if isinstance(detail, list):
        assert detail, text
        for e in detail:
            assert e["loc"] and e["loc"][0] in ("body", "path", "query", "header"), text
            assert e["msg"], text
    else:
        assert isinstance(detail, str) and NAMED.search(detail), text


@pytest.fixture(scope="module")
def fuzzed(artifact_dir: Path) -> Iterator[TestClient]:
    """The app on the memory store with the default limits, except the clock's: any
    finite ts >= 0 is in the past here, so schema-valid bodies reach the store."""
    app = create_app(Settings(artifact=artifact_dir, max_future_s=1e300, max_wait_ms=0))
    with TestClient(app) as client:
        yield client


def _case_runner(
    client: TestClient, op: Any, mode: GenerationMode, n: int, checks: list[Any]
) -> tuple[Any, list[int]]:
    """A hypothesis test sending ``n`` cases of ``op`` in ``mode``; its case count."""
    seen = [0]

    @settings(max_examples=n, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=op.as_strategy(generation_mode=mode))
    def one(case: Any) -> None:
        kw = case.as_transport_kwargs(base_url="http://testserver")
        if isinstance(kw.get("data"), bytes | str):
            kw["content"] = kw.pop("data")
        kw.pop("cookies", None)
        r = client.request(**kw)
        seen[0] += 1
        case.validate_response(r, checks=checks)
        names_field_or_limit(r.status_code, r.text)

    return one, seen


def run_schemathesis(client: TestClient, budget: dict[str, int]) -> int:
    schema = schemathesis.openapi.from_dict(client.get("/openapi.json").json())
    checks = [not_a_server_error, status_code_conformance, response_schema_conformance]
    total = 0
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            n = budget["ingest" if op.path == "/ingest" else "other"]
            more = [negative_data_rejection] if mode == GenerationMode.NEGATIVE else []
            one, seen = _case_runner(client, op, mode, n, checks + more)
            t = time.perf_counter()
            try:
                one()
            except Unsatisfiable:  # no schema-invalid data exists (no parameters)
                assert mode == GenerationMode.NEGATIVE and seen[0] == 0, op.path
            TIMES[f"{op.method.upper()} {op.path} {mode.value}"] = (
                seen[0],
                round(time.perf_counter() - t, 2),
            )
            total += seen[0]
    return total


json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(
            st.sampled_from(["stream", "readings", "streams", "ts", "values", "x"])
            | st.text(max_size=8),
            inner,
            max_size=5,
        )
    ),
    max_leaves=30,
)


def check_parse(raw: bytes) -> None:
    try:
        parse_ingest(raw)
    except RequestValidationError as e:
        for err in e.errors():
            assert err["loc"][0] == "body" and err["msg"]


names = st.from_regex(STREAM_PATTERN, fullmatch=True) | st.text(max_size=12)
numbers = st.floats(allow_nan=True, allow_infinity=True) | st.integers(
    -(10**40), 10**40
)
readings = st.lists(
    st.fixed_dictionaries(
        {"ts": numbers | st.sampled_from([0, 1.5, 1e9]),
         "values": st.lists(numbers | st.none(), min_size=0, max_size=6)}
    ),
    min_size=0, max_size=4,
)  # fmt: skip


def expected_ok(name: str, rs: list[dict[str, Any]], max_future_s: float) -> bool:
    """What the API reference promises POST /ingest accepts (4 channels here)."""
    if not re.fullmatch(STREAM_PATTERN, name) or not rs:
        return False
    ts = [float(r["ts"]) for r in rs]
    horizon = time.time() + max_future_s
    if any(not math.isfinite(t) or t < 0 or t > horizon for t in ts):
        return False
    if any(b <= a for a, b in itertools.pairwise(ts)):
        return False
    for r in rs:
        if len(r["values"]) != 4:
            return False
        for v in r["values"]:
            if v is not None and not math.isnan(v) and abs(v) > FLOAT32_MAX:
                return False
    return True


def run_properties(client: TestClient, budget: dict[str, int]) -> int:
    seen = Counter[str]()
    future = client.app.state.settings.max_future_s  # type: ignore[attr-defined]
    common = {"database": None, "deadline": None, "derandomize": True,
              "suppress_health_check": list(HealthCheck)}  # fmt: skip

    @settings(max_examples=budget["bytes"], **common)
    @given(st.binary(max_size=300))
    def any_bytes(raw: bytes) -> None:
        seen["bytes"] += 1
        check_parse(raw)

    @settings(max_examples=budget["json"], **common)
    @given(json_values)
    def any_json(obj: Any) -> None:
        seen["json"] += 1
        check_parse(json.dumps(obj).encode())

    @settings(max_examples=budget["bodies"], **common)
    @given(names, readings)
    def bodies(name: str, rs: list[dict[str, Any]]) -> None:
        """Through HTTP: accepted exactly when the reference says so, else a 4xx
        naming the field; never a 5xx."""
        seen["bodies"] += 1
        obj = {"stream": name, "readings": rs}
        r = client.post("/ingest", content=json.dumps(obj).encode(),
                        headers={"content-type": "application/json"})  # fmt: skip
        assert r.status_code < 500, r.text
        ok = expected_ok(name, rs, future)
        assert (r.status_code == 200) == ok, (obj, r.status_code, r.text)
        names_field_or_limit(r.status_code, r.text)

    any_bytes()
    any_json()
    bodies()
    return sum(seen.values())


def test_fuzz(fuzzed: TestClient) -> None:
    n = run_schemathesis(fuzzed, DEFAULT) + run_properties(fuzzed, DEFAULT)
    COUNTS["default"] = n
    assert n >= 800


@pytest.mark.fuzz_full
def test_fuzz_full(fuzzed: TestClient) -> None:
    """>= 10,000 generated cases, 0 5xx, every 4xx naming its field or limit."""
    t = time.perf_counter()
    api = run_schemathesis(fuzzed, FULL)
    props = run_properties(fuzzed, FULL)
    print(f"fuzz_full: {api} schemathesis + {props} hypothesis cases "
          f"in {time.perf_counter() - t:.0f} s; per operation and mode: {TIMES}")  # fmt: skip
    assert api + props >= 10_000


def test_the_schema_and_the_service_agree(client: TestClient) -> None:
    """Each body is valid for the documented schema exactly when the service takes it
    (before: the schema allowed both forms at once, and the service took "1.5" and
    true as numbers, which the schema did not)."""
    from jsonschema import Draft202012Validator

    spec = client.get("/openapi.json").json()
    ref = spec["paths"]["/ingest"]["post"]["requestBody"]["content"]["application/json"]
    validator = Draft202012Validator(
        {**ref["schema"], "components": spec["components"]}
    )
    r = [{"ts": 1.0, "values": [1, 2, 3, 4]}]
    one = {"stream": "s", "readings": r}
    many = {"streams": [one]}
    bodies: list[Any] = [
        one, many, {"streams": [one, {"stream": "t", "readings": r}]},
        {**one, "streams": [one]}, {"stream": "s", "streams": [one]},
        {"readings": r, "streams": [one]}, {**one, "streams": None},
        {"stream": None, "readings": r}, {**one, "extra": 1},
        {"stream": "s", "readings": [{**r[0], "q": 1}]},
        {"stream": "s", "readings": [{"ts": "1.5", "values": [1, 2, 3, 4]}]},
        {"stream": "s", "readings": [{"ts": 2.0, "values": [1, "2.5", 3, 4]}]},
        {"stream": "s", "readings": [{"ts": 3.0, "values": [True, 2, 3, 4]}]},
        {"stream": "s", "readings": [{"ts": -1.0, "values": [1, 2, 3, 4]}]},
        {"stream": "s", "readings": [{"ts": 4.0, "values": [1, 2, 3]}]},
        {"stream": "s", "readings": [{"ts": 5.0, "values": [1, 2, 3, 1e39]}]},
        {"stream": "bad/name", "readings": r}, {"stream": "s", "readings": []},
        {"streams": []}, {"stream": "s"}, {"readings": r}, {}, [one], "s", 1,
    ]  # fmt: skip
    for b in bodies:
        valid = validator.is_valid(b)
        status = client.post("/ingest", json=b).status_code
        assert status in (200, 422), (b, status)
        assert valid == (status == 200), (b, valid, status)
