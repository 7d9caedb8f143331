"""Logging of `scjepa serve`: one format for uvicorn's loggers, the service's own
(``service.*``) and the access log, plain text (the default) or JSON lines
(``SCJEPA_LOG_FORMAT=json``: one object per line, for a log shipper).

The access log is the middleware's (service/middleware.py), one line per request with
its timestamp, route template (never the raw path), status, latency and, for ingest,
the number of streams in the body; uvicorn's own access log, which has no timestamp
and no latency, is switched off (``uvicorn.run(..., access_log=False)``).

    uvicorn.run(..., log_config=logs.config(settings.log_format, args.log_level),
                access_log=False)
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Literal

LogFormat = Literal["text", "json"]

ACCESS = logging.getLogger("service.access")
# attributes of a record written to a JSON line when a call sets them (extra=...)
FIELDS = ("method", "route", "status", "latency_ms", "streams", "tenant")
TEXT = "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s"
DATE = "%Y-%m-%dT%H:%M:%S"


class UtcFormatter(logging.Formatter):
    """Text lines stamped in UTC, ISO 8601 to the millisecond."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime(datefmt or DATE, time.gmtime(record.created))


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts (UTC, ISO 8601, ms), level, logger, msg, the
    access fields a record carries, exc (a traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime(DATE, time.gmtime(record.created))
        out: dict[str, Any] = {
            "ts": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def config(fmt: LogFormat = "text", level: str = "info") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn's ``log_config``: every logger that
    `scjepa serve` writes to on one stderr handler in the chosen format. ``level`` is
    the service's (``trace`` counts as debug); uvicorn sets its own from its
    ``log_level``."""
    formatter: dict[str, Any] = (
        {"()": JsonFormatter}
        if fmt == "json"
        else {"()": UtcFormatter, "fmt": TEXT, "datefmt": DATE}
    )
    own = "DEBUG" if level == "trace" else level.upper()
    handler = {"handlers": ["default"], "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "uvicorn": {**handler, "level": "INFO"},
            "uvicorn.error": {"level": "INFO"},  # propagates to uvicorn's handler
            "uvicorn.access": {**handler, "level": "WARNING"},  # the middleware's
            "service": {**handler, "level": own},
        },
    }


def access(
    method: str, route: str, status: int, seconds: float, streams: int | None
) -> None:
    """The access line of one request (service/middleware.py)."""
    if not ACCESS.isEnabledFor(logging.INFO):
        return
    ms = round(seconds * 1000, 3)
    extra = {"method": method, "route": route, "status": status, "latency_ms": ms}
    if streams is None:
        ACCESS.info("%s %s %d %.3fms", method, route, status, ms, extra=extra)
    else:
        extra["streams"] = streams
        ACCESS.info(
            "%s %s %d %.3fms streams=%d",
            method, route, status, ms, streams, extra=extra,
        )  # fmt: skip
