"""Request and response bodies (pydantic), one naming ladder: Reading -> StreamReadings
-> IngestRequest -> IngestResponse; RiskRecord -> RiskResponse / RiskHistory."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.incidents import Outcome
from service.store import NOVELTY_SPAN

# No braces (the Redis hash tag), no slashes (the URL path), bounded length, and not
# "." or ".." (URL dot segments: no GET /risk/{stream} could name them). The one
# definition: the GET /risk paths (routes/risk.py, handlers.py) use it too.
STREAM_PATTERN = (
    r"^(?:[A-Za-z0-9_:\-][A-Za-z0-9._:\-]{0,127}"
    r"|\.[A-Za-z0-9_:\-][A-Za-z0-9._:\-]{0,126}"
    r"|\.\.[A-Za-z0-9._:\-]{1,126})$"
)
StreamName = Annotated[str, Field(pattern=STREAM_PATTERN, examples=["pump-7"])]


# A JSON number, never a string or a boolean ("1.5" and true are refused, not coerced).
Number = Annotated[float, Field(strict=True)]
FORBID = ConfigDict(extra="forbid")  # an unknown field is refused (422), not ignored


class Reading(BaseModel):
    """One time step of a stream: every input channel, in the model's channel order."""

    model_config = FORBID

    ts: Number = Field(
        ge=0,
        allow_inf_nan=False,
        examples=[1700000000.0],
        description="Seconds (e.g. Unix time), at least 0 and at most "
        "SCJEPA_MAX_FUTURE_S ahead of the service's clock.",
    )
    values: list[Number | None] = Field(
        min_length=1,
        description="One value per input channel; null (or NaN) = missing, forward-"
        "filled from the stream's last accepted value. Infinities and values beyond "
        "float32 (the model's type) are refused.",
    )


def _increasing(readings: list[Reading] | None) -> list[Reading] | None:
    for i in range(1, len(readings or ())):
        assert readings is not None
        if readings[i].ts <= readings[i - 1].ts:
            raise ValueError(
                f"readings[{i}].ts = {readings[i].ts} is not greater than "
                f"readings[{i - 1}].ts = {readings[i - 1].ts}: timestamps "
                "must increase within a request"
            )
    return readings


class StreamReadings(BaseModel):
    model_config = FORBID

    stream: StreamName
    readings: list[Reading] = Field(min_length=1)

    _increasing = field_validator("readings")(_increasing)


INGEST_EXAMPLES: list[Any] = [
    {
        "stream": "pump-7",
        "readings": [{"ts": 1700000000.0, "values": [0.1, 2.3, None]}],
    },
    {
        "streams": [
            {"stream": "pump-7", "readings": [{"ts": 1.0, "values": [1, 2, 3]}]},
            {"stream": "fan-2", "readings": [{"ts": 1.0, "values": [4, 5, 6]}]},
        ]
    },
]


def _document_one_form(schema: dict[str, Any]) -> None:
    """The documented body says what the service accepts: exactly one of the two forms
    (``oneOf``), no field null, nothing else."""
    props: dict[str, Any] = schema["properties"]
    for name, prop in list(props.items()):
        options = prop.get("anyOf")
        if isinstance(options, list):  # X | None -> X: null is refused
            keep = [o for o in options if o != {"type": "null"}]
            rest = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
            props[name] = {**rest, **keep[0]}
    schema["oneOf"] = [
        {"required": ["stream", "readings"], "not": {"required": ["streams"]}},
        {
            "required": ["streams"],
            "not": {"anyOf": [{"required": ["stream"]}, {"required": ["readings"]}]},
        },
    ]
    schema["examples"] = INGEST_EXAMPLES


class IngestRequest(BaseModel):
    """Either one stream (``stream`` + ``readings``) or many (``streams``)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=_document_one_form,
    )

    stream: StreamName | None = None
    readings: list[Reading] | None = Field(None, min_length=1)
    streams: list[StreamReadings] | None = Field(None, min_length=1)

    _increasing = field_validator("readings")(_increasing)

    @field_validator("stream", "readings", "streams", mode="before")
    @classmethod
    def _not_null(cls, v: object) -> object:
        if v is None:
            raise ValueError("must not be null (leave the field out instead)")
        return v

    @model_validator(mode="after")
    def _one_form(self) -> IngestRequest:
        single = self.stream is not None or self.readings is not None
        if single == (self.streams is not None):
            raise ValueError(
                "send either 'stream' + 'readings' or 'streams' (a list of those)"
            )
        if single and (self.stream is None or not self.readings):
            raise ValueError("'stream' and a non-empty 'readings' go together")
        names = [s.stream for s in self.items()]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"streams listed more than once: {dupes}")
        return self

    def items(self) -> list[StreamReadings]:
        if self.streams is not None:
            return self.streams
        assert self.stream is not None and self.readings is not None
        return [
            StreamReadings.model_construct(stream=self.stream, readings=self.readings)
        ]


class ModelRef(BaseModel):
    name: str
    version: str


class StreamIngestResult(BaseModel):
    stream: str
    accepted: int
    duplicates: int  # timestamps already accepted: ignored
    # late: older than the stream's newest accepted reading by more than
    # SCJEPA_ALLOWED_LATENESS_S (0: older at all): not stored; rejected_reason says so
    rejected: int
    rejected_reason: str | None = None
    # accepted readings the stream holds until the watermark passes them (allowed
    # lateness > 0), then merged in timestamp order into its windows
    held: int = 0
    readings_total: int  # accepted by this stream so far
    windows_completed: int
    # completed windows queued for the scorers (all of them, unless the queue is
    # past SCJEPA_MAX_QUEUED_WINDOWS: then the newest only, and the rest are shed)
    windows_queued: int
    windows_shed: int = 0  # completed, kept as readings, not queued (back-pressure)
    # queued windows whose risk was written before this answer (?wait=S waits for
    # them up to S seconds; without it usually 0: read GET /risk later)
    windows_scored: int
    # the latest of this call's windows scored by then: its risk, and the reading
    # count and timestamp that completed it
    risk: float | None = None
    alert: bool | None = None
    window_n: int | None = None
    window_end: float | None = None
    model: ModelRef | None = None  # the model that scored that window


class IngestResponse(BaseModel):
    results: list[StreamIngestResult]


class ChannelShare(BaseModel):
    name: str
    share: float


# records written before the field existed read as null too
NOVELTY_DOC = (
    "How unlike the training data's normal windows this window is, in [0, 1] (its "
    "rank among them: about 0.5 typical, near 1 unlike any); windows at or above the "
    "manifest's novelty.level count in scjepa_windows_unlike_training_total. null "
    "when the model has no input-drift monitor (manifest novelty null)."
)


RECENT_NOVELTY_DOC = (
    "The stream's recent novelty: an exponentially weighted mean of its scored "
    f"windows' novelty over about the last {NOVELTY_SPAN} (starting from 0.5, what "
    "windows like the training data's give), so that a stream that stays unlike "
    "the training data rises toward 1 where one window's novelty is noise; "
    "scjepa_top_stream_novelty lists the streams where it is highest. null when the "
    "model has no input-drift monitor, and for a stream scored only before it was "
    "kept."
)


class RiskRecord(BaseModel):
    """One scored window (the store keeps the latest ``history_len`` per stream)."""

    n: int = Field(description="the stream's reading count that completed the window")
    risk: float
    threshold: float
    alert: bool
    window_start: float
    window_end: float
    top_channels: list[ChannelShare]
    codes: list[int]
    novelty: float | None = Field(None, description=NOVELTY_DOC)
    model: ModelRef
    computed_at: datetime


class RiskResponse(BaseModel):
    stream: str
    status: Literal["ok", "warming_up"]
    readings_total: int
    readings_buffered: int
    progress: float = Field(description="readings_buffered / window, 1.0 once scored")
    risk: float | None = None
    threshold: float
    alert: bool | None = None
    window_start: float | None = None
    window_end: float | None = None
    top_channels: list[ChannelShare] = []
    novelty: float | None = Field(None, description=NOVELTY_DOC)
    recent_novelty: float | None = Field(None, description=RECENT_NOVELTY_DOC)
    model: ModelRef
    computed_at: datetime | None = None


class RiskHistory(BaseModel):
    stream: str
    items: list[RiskRecord]  # newest first


class StreamsResponse(BaseModel):
    streams: list[str]  # by name, at most `limit`
    next: str | None = Field(
        None,
        description="the last name of a full page: pass it as `after` for the next",
    )


class StreamRisk(BaseModel):
    stream: str
    risk: float = Field(description="its latest risk")
    alert: bool = Field(description="risk at or above the loaded model's threshold")


class TopStreamsResponse(BaseModel):
    # the tenant's live streams of highest latest risk, highest first, at most `limit`
    # (streams not scored yet are not listed)
    streams: list[StreamRisk]
    threshold: float = Field(description="the loaded model's alert threshold")


# An incident's id: as a stream's name, and '@' (the default id is "stream@onset").
INCIDENT_PATTERN = r"^[A-Za-z0-9_:\-][A-Za-z0-9._:@+\-]{0,199}$"
OUTCOME_DOC = (
    "warned: a window in alert ended before the onset, within the look-back; late: "
    "not warned, a window in alert ended within the incident; missed: neither; "
    "unscored: no window of the stream was scored before the onset; unknown: the "
    "stream's alert log no longer reaches back to the onset's look-back"
)


class IncidentReport(BaseModel):
    """An incident on one of the tenant's streams, as the operator knows it."""

    model_config = FORBID

    stream: StreamName
    start: Number = Field(
        ge=0,
        allow_inf_nan=False,
        examples=[1700000500.0],
        description="The onset: the timestamp (as the readings' ts) of its first "
        "anomalous reading.",
    )
    end: Number | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="The timestamp of its last anomalous reading; default: the "
        "stream's newest reading when reported (the incident still going on).",
    )
    id: Annotated[str, Field(pattern=INCIDENT_PATTERN)] | None = Field(
        None,
        description='Default "STREAM@START". An id reported again is replaced (and '
        "judged again).",
    )

    @model_validator(mode="after")
    def _ordered(self) -> IncidentReport:
        if self.end is not None and self.end < self.start:
            raise ValueError(
                f"end = {self.end} is before start = {self.start}: an incident ends "
                "at or after its onset"
            )
        return self


class Incident(BaseModel):
    """An incident reported, with what the service's alerts did about it."""

    id: str
    stream: str
    start: float
    end: float = Field(description="as given, or the stream's newest reading then")
    outcome: Outcome = Field(description=OUTCOME_DOC)
    lead_s: float | None = Field(
        None,
        description="warned: the onset minus the end of the first window in alert "
        "of the run that warned (seconds, in the readings' time)",
    )
    lead_readings: int | None = Field(None, description="lead_s in readings")
    delay_s: float | None = Field(
        None,
        description="late: the end of the first window in alert within the incident "
        "minus the onset",
    )
    delay_readings: int | None = Field(None, description="delay_s in readings")
    alert_window_end: float | None = Field(
        None, description="the end of the window in alert lead_s or delay_s is of"
    )
    lookback: int = Field(
        description="readings before the onset in which an alert warns of it (the "
        "model's look-back)"
    )
    reported_at: datetime


class IncidentList(BaseModel):
    incidents: list[Incident]  # newest reported first


class PointOnIncidents(BaseModel):
    """One of the model's operating points, and what it would have done about the
    tenant's incidents reported."""

    false_alarms_per_1000: float = Field(
        description="the budget the point's threshold was set to keep on validation"
    )
    threshold: float
    serving: bool = Field(description="the point the tenant is served at")
    exact: bool = Field(
        description="its threshold is at or above the one served, so the alert log "
        "(windows in alert at the threshold served) holds every window it would have "
        "put in alert; under it, windows under the threshold served are missing and "
        "its warned count is a lower bound"
    )
    incidents: dict[Outcome, int] = Field(
        description="the incidents judged at this point's threshold, by outcome "
        "(those on a stream now gone: unknown)"
    )
    warned_share: float | None = Field(
        description="warned / (warned + late + missed); null with none of those"
    )
    test: dict[str, Any] | None = Field(
        description="what the evaluation's test split measured at this point (the "
        "manifest's operating_points[].test; null where it records none)"
    )


class OperatingPoints(BaseModel):
    """The model's operating points for the caller's tenant, each with what it would
    have done about the tenant's incidents reported (POST /incidents)."""

    threshold: float = Field(description="the threshold the tenant is served at")
    incidents_since: datetime = Field(
        description="the incidents judged are those reported since (30 days)"
    )
    incidents_judged: int = Field(description="how many (at most the limit asked)")
    points: list[PointOnIncidents]  # by budget, ascending


class ReloadStatus(BaseModel):
    """The last hot reload of the model (POST /admin/reload or SIGHUP)."""

    outcome: Literal["none", "ok", "failed"]  # none: not reloaded since start-up
    serving: ModelRef  # the model answering now
    previous: ModelRef | None = None  # what an ok reload replaced
    error: str | None = None  # why a failed one was refused (the old model stays)
    at: datetime | None = None
    seconds: float | None = None  # load + checks + warm-up


class ErrorResponse(BaseModel):
    detail: Any


class HealthResponse(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, Any] = {}
