"""What a benchmark reports: figures, each a ratio against a baseline with its target.

A :class:`Figure` holds the measured value, the baseline measured in the same run, the
ratio between them and the target the issue sets on that ratio (``>= 0.7`` for
throughput, ``<= 3`` for latency, ...). A figure without a target is reported for
information (batch 1, the naive design, ...). ``details`` keeps the evidence behind it
(load-generator CPU, server CPU, percentiles, a profile when the target missed).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Target:
    op: Literal[">=", "<="]
    ratio: float

    def holds(self, ratio: float) -> bool:
        if math.isnan(ratio):
            return False
        return ratio >= self.ratio if self.op == ">=" else ratio <= self.ratio

    def __str__(self) -> str:
        return f"{self.op} {self.ratio:g}x"


AT_LEAST = lambda r: Target(">=", r)  # noqa: E731
AT_MOST = lambda r: Target("<=", r)  # noqa: E731


@dataclass
class Figure:
    bench: str  # "1 REST produce"
    name: str  # "acks=1, batch 100"
    value: float
    unit: str
    baseline_name: str
    baseline: float | None
    target: Target | None = None
    details: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline

    @property
    def passed(self) -> bool | None:
        if self.target is None or self.ratio is None:
            return None
        return self.target.holds(self.ratio)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["target"] = str(self.target) if self.target else None
        d["ratio"] = self.ratio
        d["passed"] = self.passed
        return d


@dataclass
class Skipped:
    bench: str
    reason: str
