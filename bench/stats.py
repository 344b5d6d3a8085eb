"""Percentiles and small summaries of latency samples (milliseconds)."""

from __future__ import annotations

import numpy as np


def pct(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    return float(np.percentile(np.asarray(samples, dtype=float), q))


def summary(samples: list[float]) -> dict:
    return {"n": len(samples), "p50_ms": pct(samples, 50), "p90_ms": pct(samples, 90),
            "p99_ms": pct(samples, 99), "max_ms": max(samples) if samples else float("nan")}
