"""`scjepa bench serve` end to end, tiny: a real uvicorn process, a real redis-server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.components import require
from training.bench.serve import Conn
from training.cli import main


def test_bench_serve_reports_every_figure(artifact_dir: Path, tmp_path: Path) -> None:
    require("redis-server")
    out = tmp_path / "serve.json"
    args = ["bench", "serve", "--artifact", str(artifact_dir), "--streams", "4"]
    args += ["--requests", "40", "--readings-per-request", "50", "--max-batch", "4"]
    args += ["--risk-rate", "20", "--risk-seconds", "1", "--json", str(out)]
    args += ["--scoring-rate", "8", "--drain-windows", "40"]
    assert main(args) == 0
    res = json.loads(out.read_text())
    # the machine: CPU model, load before and after, the commit measured
    assert res["cpu"] and res["commit"]
    assert len(res["load_before"]) == len(res["load_after"]) == 3
    ing, score, risk = res["ingest"], res["scoring"], res["risk_during_scoring"]
    # every request was accepted in full: 40 x 50 readings, none lost or refused
    assert ing["errors"] == ing["duplicates"] == ing["late"] == 0
    assert ing["requests"] == 40
    assert ing["readings_per_s"] * ing["seconds"] == pytest.approx(40 * 50)
    assert ing["windows_per_s"] == 0  # scoring off: each stream's window came earlier
    assert ing["vs_bare_redis"] > 0 and res["bare_redis"]["readings_per_s"] > 0
    # the same readings as MessagePack columns, on their own streams
    pack = res["ingest_msgpack"]
    assert (pack["body"], ing["body"]) == ("application/msgpack", "application/json")
    assert pack["errors"] == pack["duplicates"] == pack["late"] == 0
    assert pack["readings_per_s"] * pack["seconds"] == pytest.approx(40 * 50)
    assert pack["vs_bare_redis"] > 0
    assert res["bare_redis"]["writes"] == "rows+seen+state"
    # each ceiling: the mean of a run before and one after the service's
    runs = res["bare_redis"]["runs"]
    assert len(runs) == 2 and res["bare_redis"]["readings_per_s"] == pytest.approx(
        sum(runs) / 2
    )
    assert res["bare_redis_rows_only"]["writes"] == "rows"
    # hop 100, 100 readings a request: each request past the first per stream scores
    assert score["errors"] == 0 and score["windows_per_s"] > 0
    assert score["standalone_onnxruntime_windows_per_s"] > 0
    assert 1 <= score["standalone_windows_per_call"] <= 4  # the service's runtime
    assert 1 <= score["mean_batch"] <= 4
    assert risk["errors"] == 0 and risk["sent"] >= 10
    assert risk["p50_ms"] <= risk["p99_ms"]
    # the fixed-rate load: 8 windows/s for risk-seconds + 1 s, paced, not as fast as
    # the service answers (16 requests, the last due at 15 / 8 s)
    fixed, risk2 = res["fixed_rate_scoring"], res["risk_during_fixed_rate_scoring"]
    assert fixed["rate"] == 8 and fixed["requests"] == 16
    assert fixed["errors"] == fixed["late"] == 0
    assert fixed["seconds"] >= 15 / 8
    assert fixed["windows_per_s"] * fixed["seconds"] == pytest.approx(16)
    # capacity: the lower of the API's saturated rate and the scorer tier's drain
    drain = res["scorer_drain"]
    capacity = min(score["windows_per_s"], drain["windows_per_s"])
    assert fixed["capacity_windows_per_s"] == pytest.approx(capacity)
    assert fixed["fraction_of_capacity"] == pytest.approx(8 / capacity)
    assert risk2["errors"] == 0 and risk2["sent"] >= 10
    # the scorer tier with the queue never empty: every queued window scored, in
    # batches no larger than --max-batch although one read brings more
    assert drain["windows"] == 40 and drain["fill_errors"] == 0
    assert drain["windows_per_s"] * drain["seconds"] == pytest.approx(40)
    assert drain["vs_standalone"] > 0 and 1 <= drain["mean_batch"] <= 4
    # the scoring process's own CPU a window: measured over the drain (not NaN: the
    # process was found); 40 windows drain within a few 10 ms clock ticks, so 0 is
    # possible here
    assert 0 <= drain["scorer_cpu_us_per_window"] < 1e6, drain


def test_client_reopens_a_keep_alive_connection_the_server_closed() -> None:
    """A server may close an idle keep-alive connection (uvicorn after 5 s): the load
    generator's next request on it reopens the connection once instead of failing; a
    server that closes a fresh connection without answering is an error."""

    async def one_answer_then_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def silent(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def go() -> tuple[list[tuple[int, bytes]], BaseException | None]:
        server = await asyncio.start_server(one_answer_then_close, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = Conn("127.0.0.1", port)
        answers = [await conn.request("GET", "/risk/a")]
        await asyncio.sleep(0.05)  # the server has closed it by now
        answers.append(await conn.request("GET", "/risk/b"))
        await conn.close()
        server.close()
        bad = await asyncio.start_server(silent, "127.0.0.1", 0)
        err = None
        try:
            await Conn("127.0.0.1", bad.sockets[0].getsockname()[1]).request("GET", "/")
        except ConnectionResetError as e:
            err = e
        bad.close()
        return answers, err

    answers, err = asyncio.run(go())
    assert answers == [(200, b"ok"), (200, b"ok")]
    assert isinstance(err, ConnectionResetError)


def test_bench_streams_long_lived_measures_the_scorers_records(tmp_path: Path) -> None:
    """`scjepa bench streams --long-lived`: one stream written through the service's
    store (its own redis-server), each key's bytes adding up to the stream's, the
    risk history 500 records as the scorer writes them (a few hundred bytes each)."""
    require("redis-server")
    out = tmp_path / "long.json"
    assert main(["bench", "streams", "--long-lived", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    keys = res["bytes_by_key"]
    assert set(keys) == {"rows", "seen", "state", "risk"}
    assert sum(keys.values()) == res["bytes_per_stream"]
    assert res["streams_per_gib"] == round(2**30 / res["bytes_per_stream"])
    assert 500 * 400 < keys["risk"] < 500 * 1000
    assert keys["seen"] >= 8 * 10_000 and keys["rows"] >= 100 * (8 + 4 * 25)
    assert res["seen_as_sorted_set"] > keys["seen"]
