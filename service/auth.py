"""Tenants and API keys: who a request is, from its ``X-API-Key`` header (or
``Authorization: Bearer KEY``), and the per-key rate limit.

A key belongs to a *principal*: a tenant name (its streams are its own: every store key
carries the tenant), ``@admin`` (POST /admin/reload) or ``@ops`` (the probes and
/metrics, when ``SCJEPA_OPS_KEY_ROUTES`` puts them behind a key; an @admin key opens
them too). Keys are held only as SHA-256 digests and compared in constant time (every
entry is compared, whichever matches). They come from two sources, merged:

- ``SCJEPA_API_KEYS``: comma-separated ``[PRINCIPAL:]KEY`` or ``[PRINCIPAL:]sha256:HEX``
  (no principal = tenant ``default``); a plain key is hashed when the settings load;
- ``SCJEPA_API_KEYS_FILE``: lines ``PRINCIPAL sha256:HEX`` (``#`` comments), hashes
  only, re-read when the file changes (checked every second) and on SIGHUP; a file
  that fails to parse leaves the previous keys in force and is reported (log, metric).

The file also holds the tenants' own operating points, ``TENANT fa_budget:B`` (false
alarms per 1,000 windows, one of the model's operating points; beside
``SCJEPA_TENANT_FA_BUDGET``, which cannot name the same tenant): re-read with the keys,
so a tenant's pages change without a restart. A budget the model serving has no
threshold for refuses the whole file, as a line that does not parse does.

Without any tenant key the service is open: every request is tenant ``default``, as
before tenants existed. Keys are random tokens (128 bits or more), not passwords: an
unsalted SHA-256 is the right digest for them. Make one and its file line with::

    KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')
    echo "acme sha256:$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)" >> keys.txt
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from service import metrics
from service.manifest import TENANT_BUDGETS, ArtifactError, Budget

log = logging.getLogger(__name__)

TENANT_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"  # no '/', ':' or braces (store keys)
DEFAULT_TENANT = "default"
ADMIN, OPS = "@admin", "@ops"
OPS_ROUTES = ("/healthz", "/readyz", "/metrics")
WATCH_EVERY_S = 1.0
_TENANT = re.compile(TENANT_PATTERN)
_HEX = re.compile(r"^[0-9a-f]{64}$")
HASH_PREFIX = "sha256:"
BUDGET_PREFIX = "fa_budget:"  # a key file's "TENANT fa_budget:B" line
BUDGET_FILE = "SCJEPA_API_KEYS_FILE"  # what a Budget of the file is set by


class KeyConfigError(ValueError):
    """A key entry or file line that cannot be used; never quotes the key itself."""


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def _principal(name: str, where: str) -> str:
    if name in (ADMIN, OPS) or _TENANT.match(name):
        return name
    raise KeyConfigError(
        f"{where}: principal {name!r} is neither a tenant name "
        f"({TENANT_PATTERN}) nor {ADMIN} / {OPS}"
    )


def _hex(secret: str, where: str) -> str:
    h = secret[len(HASH_PREFIX) :].lower()
    if not _HEX.match(h):
        raise KeyConfigError(f"{where}: sha256: must be followed by 64 hex digits")
    return h


def normalise_entry(entry: str, where: str = "SCJEPA_API_KEYS") -> str:
    """``[PRINCIPAL:]KEY`` or ``[PRINCIPAL:]sha256:HEX`` -> ``PRINCIPAL:sha256:HEX``.

    A plain key is hashed here; one that holds ':' must be given with its principal."""
    entry = entry.strip()
    if HASH_PREFIX in entry.lower():  # any case, as the key file reads it
        at = entry.lower().index(HASH_PREFIX)
        principal, secret = entry[:at].rstrip(":") or DEFAULT_TENANT, entry[at:]
        return f"{_principal(principal, where)}:{HASH_PREFIX}{_hex(secret, where)}"
    principal, sep, key = entry.partition(":")
    if not sep:
        principal, key = "", entry
    if not key:
        raise KeyConfigError(f"{where}: an entry has an empty key")
    h = hashlib.sha256(key.encode()).hexdigest()
    return f"{_principal(principal or DEFAULT_TENANT, where)}:{HASH_PREFIX}{h}"


def _budget(tenant: str, value: str, where: str) -> float:
    if not _TENANT.match(tenant):
        raise KeyConfigError(
            f"{where}: {tenant!r} is no tenant name ({TENANT_PATTERN}): only a tenant "
            "has an operating point of its own"
        )
    try:
        budget = float(value)
    except ValueError:
        budget = math.nan
    if not (math.isfinite(budget) and budget > 0):
        raise KeyConfigError(
            f"{where}: {BUDGET_PREFIX}{value}: the budget must be a number above 0 "
            "(false alarms per 1,000 windows)"
        )
    return budget


def parse_file(
    text: str, path: Path | str, env_budgets: Mapping[str, float] = {}
) -> tuple[list[str], dict[str, Budget]]:
    """The entries of a key file, ``PRINCIPAL sha256:HEX`` per line (plain keys are
    refused: the file stores hashes only), and its tenants' budgets, ``TENANT
    fa_budget:B`` per line (each tenant once, none that ``env_budgets``,
    SCJEPA_TENANT_FA_BUDGET, names)."""
    out: list[str] = []
    budgets: dict[str, Budget] = {}
    for no, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{no}"
        parts = line.split()
        if len(parts) == 2 and parts[1].lower().startswith(BUDGET_PREFIX):
            tenant = parts[0]
            budget = _budget(tenant, parts[1][len(BUDGET_PREFIX) :], where)
            if tenant in budgets or tenant in env_budgets:
                by = "this file" if tenant in budgets else TENANT_BUDGETS
                raise KeyConfigError(
                    f"{where}: tenant {tenant}'s budget is given by {by} already"
                )
            budgets[tenant] = Budget(budget, BUDGET_FILE)
            continue
        if len(parts) != 2 or not parts[1].lower().startswith(HASH_PREFIX):
            raise KeyConfigError(
                f"{where}: expected 'PRINCIPAL sha256:HEX' (the file holds hashes "
                "only: printf %s KEY | sha256sum) or 'TENANT fa_budget:B'"
            )
        principal = _principal(parts[0], where)
        out.append(f"{principal}:{HASH_PREFIX}{_hex(parts[1], where)}")
    return out, budgets


class Identity(NamedTuple):
    principal: str
    key_id: str  # the first 16 hex digits of the key's digest: rate-limit bucket name


@dataclass(frozen=True)
class KeyTable:
    entries: tuple[tuple[bytes, str], ...] = ()  # (SHA-256 digest, principal)
    # the tenants at an operating point of their own (SCJEPA_TENANT_FA_BUDGET and the
    # file's budget lines)
    budgets: Mapping[str, Budget] = field(default_factory=dict)

    @classmethod
    def of(
        cls, normalised: list[str], budgets: Mapping[str, Budget] | None = None
    ) -> KeyTable:
        entries = []
        for e in normalised:
            principal, _, h = e.rpartition(":" + HASH_PREFIX)
            entries.append((bytes.fromhex(h), principal))
        return cls(tuple(entries), dict(budgets or {}))

    @property
    def open(self) -> bool:
        """No tenant key: every request is the default tenant."""
        return not any(not p.startswith("@") for _, p in self.entries)

    @property
    def tenants(self) -> list[str]:
        """The tenants keys belong to (``default`` alone in an open service)."""
        if self.open:
            return [DEFAULT_TENANT]
        return sorted({p for _, p in self.entries if not p.startswith("@")})

    def has(self, principal: str) -> bool:
        return any(p == principal for _, p in self.entries)

    def identify(self, key: str | None) -> Identity | None:
        """The principal of ``key``; every entry is compared, in constant time."""
        if key is None:
            return None
        d = digest(key)
        found = None
        for h, p in self.entries:
            if hmac.compare_digest(d, h):
                found = p
        return None if found is None else Identity(found, d.hex()[:16])


class Keys:
    """The key table in force: from the settings and the key file, swapped whole by
    :meth:`reload` (the previous table stays when the new one cannot be read)."""

    def __init__(
        self,
        env_entries: list[str],
        path: Path | None = None,
        env_budgets: Mapping[str, float] = {},
    ) -> None:
        self.env = list(env_entries)
        self.env_budgets = dict(env_budgets)
        self.path = path
        self.error: str | None = None
        # called with a reloaded file's table where its budgets changed, before it is
        # in force: the model serving applies them, or raises ArtifactError to refuse
        # the file (the app sets it: service.reload.ModelSlot.serve_budgets)
        self.on_budgets: Callable[[KeyTable], None] | None = None
        self._stamp = self._file_stamp()
        self.table = self._build()  # a broken file at start-up is fatal
        metrics.tenants_known(self.table.tenants)

    def _file_stamp(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _build(self) -> KeyTable:
        entries = list(self.env)
        budgets = {t: Budget(b) for t, b in self.env_budgets.items()}
        if self.path is not None:
            try:
                text = self.path.read_text()
            except UnicodeDecodeError as e:  # not a key file: say which, no traceback
                raise KeyConfigError(f"{self.path}: not UTF-8 text ({e.reason})") from e
            in_file, own = parse_file(text, self.path, self.env_budgets)
            entries += in_file
            budgets |= own
        return KeyTable.of(entries, budgets)

    def reload(self) -> bool:
        """Re-read the file; True when the new table is in force."""
        self._stamp = self._file_stamp()
        try:
            table = self._build()
        except (OSError, KeyConfigError) as e:
            self.error = str(e)
            log.error("API keys not reloaded, the previous keys stay: %s", e)
            metrics.RELOADS.labels(what="keys", outcome="failed").inc()
            return False
        if table.open and not self.table.open:
            # an empty or all-comment file (every key revoked, or a rewrite caught
            # half-way): a keyed service would take requests without any key
            self.error = (
                f"{self.path}: no tenant key left, and a reload does not open a keyed "
                "service (to shut every tenant out, stop it; to run it without keys, "
                "restart it so)"
            )
            log.error("API keys not reloaded, the previous keys stay: %s", self.error)
            metrics.RELOADS.labels(what="keys", outcome="failed").inc()
            return False
        if table.budgets != self.table.budgets and self.on_budgets is not None:
            try:  # the model serving applies them, or refuses the file
                self.on_budgets(table)
            except ArtifactError as e:
                self.error = f"{self.path}: {e}"
                log.error(
                    "API keys not reloaded, the previous keys and budgets stay: %s",
                    self.error,
                )
                metrics.RELOADS.labels(what="keys", outcome="failed").inc()
                return False
        gone = set(self.table.tenants) - set(table.tenants)
        self.table, self.error = table, None
        metrics.tenants_known(table.tenants, gone)
        n = len(table.entries)
        log.info("API keys loaded: %d key(s), %s", n, "open" if table.open else "keyed")
        metrics.RELOADS.labels(what="keys", outcome="ok").inc()
        return True

    def reload_if_changed(self) -> bool | None:
        if self.path is None or self._file_stamp() == self._stamp:
            return None
        return self.reload()

    async def watch(self, every_s: float = WATCH_EVERY_S) -> None:
        """Reload whenever the key file changes (a task of the app's lifespan)."""
        while True:
            await asyncio.sleep(every_s)
            with contextlib.suppress(Exception):  # never let the watcher die
                self.reload_if_changed()

    # -- who is asking
    def identify(self, key: str | None) -> Identity | None:
        return self.table.identify(key)

    @property
    def open(self) -> bool:
        return self.table.open
