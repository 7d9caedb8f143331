"""A seeded synthetic benchmark with predictable anomalies, for tests and the demo.

Each entity is a multivariate series built from a few shared latent oscillations whose
frequency and amplitude switch between regimes, mixed into channels with channel noise
and slow random-walk drifts. The test series carries injected anomalies (level shifts,
spike bursts, variance bursts, frozen sensors) on a subset of channels, and every anomaly
is PRECEDED by a short precursor on the same channels: bursts of small shocks whose
amplitude grows towards the onset. So the window before an anomaly holds evidence of
it, which is what anomaly *prediction* needs. The train series is anomaly-free.
"""

from __future__ import annotations

import numpy as np

from training.data.types import Dataset, Entity


def _normal_series(
    rng: np.random.Generator, steps: int, n_channels: int, n_factors: int = 3
) -> np.ndarray:
    """Regime-switching latent oscillations mixed into channels, plus noise and drift."""
    t = np.arange(steps)
    factors = np.empty((steps, n_factors))
    for f in range(n_factors):
        bounds = (
            np.sort(
                rng.choice(
                    np.arange(200, steps - 200), size=steps // 1500, replace=False
                )
            )
            if steps > 600
            else np.array([], int)
        )
        segs = np.split(t, bounds)
        phase, out = rng.uniform(0, 2 * np.pi), []
        for seg in segs:  # one regime per segment: its own period and amplitude
            period, amp = rng.uniform(20, 120), rng.uniform(0.5, 1.5)
            out.append(amp * np.sin(phase + 2 * np.pi * (seg - seg[0]) / period))
            phase += 2 * np.pi * len(seg) / period
        factors[:, f] = np.concatenate(out)
    mixing = rng.normal(0, 1, (n_factors, n_channels))  # (F, V)
    drift = np.cumsum(rng.normal(0, 0.01, (steps, n_channels)), axis=0)  # random walk
    noise = rng.normal(0, 0.1, (steps, n_channels))
    return factors @ mixing + drift + noise  # (T, V)


def _inject(rng: np.random.Generator, x: np.ndarray, n_anomalies: int) -> np.ndarray:
    """Insert precursor + anomaly pairs into ``x`` in place; returns per-step labels."""
    steps, n_channels = x.shape
    labels = np.zeros(steps, dtype=np.int8)
    scale = x.std(axis=0) + 1e-6
    slots = np.linspace(300, steps - 300, n_anomalies + 1).astype(int)
    for i in range(n_anomalies):
        onset = int(rng.integers(slots[i], max(slots[i] + 1, slots[i + 1] - 200)))
        length = int(rng.integers(10, 80))
        end = min(onset + length, steps)
        chans = rng.choice(n_channels, size=max(1, n_channels // 3), replace=False)
        # Precursor: shocks of growing amplitude in the steps before the onset.
        lead = int(rng.integers(80, 180))
        pre = np.arange(max(0, onset - lead), onset)
        ramp = np.linspace(0.1, 1.0, len(pre))[:, None]
        shocks = (rng.random((len(pre), len(chans))) < 0.5) * rng.normal(
            0, 2.5, (len(pre), len(chans))
        )
        x[np.ix_(pre, chans)] += ramp * shocks * scale[chans]
        # The anomaly itself.
        seg = np.arange(onset, end)
        kind = rng.integers(4)
        if kind == 0:  # level shift
            x[np.ix_(seg, chans)] += rng.choice([-3, 3]) * scale[chans]
        elif kind == 1:  # spike burst
            x[np.ix_(seg, chans)] += (
                (rng.random((len(seg), len(chans))) < 0.3)
                * rng.normal(0, 4, (len(seg), len(chans)))
                * scale[chans]
            )
        elif kind == 2:  # variance burst
            x[np.ix_(seg, chans)] += (
                rng.normal(0, 2, (len(seg), len(chans))) * scale[chans]
            )
        else:  # frozen sensor
            x[np.ix_(seg, chans)] = x[onset, chans]
        labels[onset:end] = 1
    return labels


def make_synthetic(
    seed: int = 0,
    *,
    n_entities: int = 4,
    n_channels: int = 8,
    train_steps: int = 6000,
    test_steps: int = 12000,
    anomalies_per_entity: int = 8,
    name: str = "synthetic",
) -> Dataset:
    """Build the synthetic data set; identical for identical arguments."""
    rng = np.random.default_rng(seed)
    entities = []
    for e in range(n_entities):
        # One continuous series cut in time, so train and test share the same process.
        series = _normal_series(rng, train_steps + test_steps, n_channels)
        train, test = series[:train_steps], series[train_steps:].copy()
        labels = _inject(rng, test, anomalies_per_entity)
        entities.append(
            Entity(
                f"unit-{e + 1}",
                train.astype(np.float32),
                test.astype(np.float32),
                labels,
            )
        )
    return Dataset(name, [f"sensor_{i + 1}" for i in range(n_channels)], entities)
