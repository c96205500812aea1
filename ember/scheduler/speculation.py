"""Speculation settings (Spark's spark.speculation.* keys) read once per application."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember import config


@dataclass(frozen=True)
class SpeculationSettings:
    interval: float = 0.1
    multiplier: float = 3.0
    quantile: float = 0.9
    min_task_runtime: float = 0.1
    duration_threshold: float | None = None
    executor_cores: int = 1          # slots of one executor (SPARK-29976's bound)

    @classmethod
    def from_conf(cls, conf: Any) -> SpeculationSettings | None:
        """None when spark.speculation is off."""
        if not config.read(conf, "spark.speculation"):
            return None
        cores = config.read(conf, "spark.executor.cores") or 1
        return cls(config.read(conf, "spark.speculation.interval"),
                   config.read(conf, "spark.speculation.multiplier"),
                   config.read(conf, "spark.speculation.quantile"),
                   config.read(conf, "spark.speculation.minTaskRuntime"),
                   config.read(conf, "spark.speculation.task.duration.threshold"),
                   max(cores // max(config.read(conf, "spark.task.cpus"), 1), 1))


def median(sorted_values: list[float]) -> float:
    """Spark's MedianHeap.median: the middle value, or the mean of the two middle ones."""
    n = len(sorted_values)
    mid = n // 2
    if n % 2:
        return sorted_values[mid]
    return (sorted_values[mid - 1] + sorted_values[mid]) / 2.0
