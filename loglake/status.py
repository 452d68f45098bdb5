"""One place that computes each dataset's per-partition state (CLI, Airflow UI, tests)."""

from __future__ import annotations

from dataclasses import dataclass

from loglake.config import Config, Dataset


@dataclass(frozen=True)
class PartitionStatus:
    partition: int
    earliest: int
    end: int
    speed_position: int | None
    watermark: int | None

    @property
    def speed_lag(self) -> int | None:
        return None if self.speed_position is None else self.end - self.speed_position

    @property
    def batch_lag(self) -> int:
        return self.end - (self.watermark if self.watermark is not None else self.earliest)


def dataset_status(config: Config, ds: Dataset) -> list[PartitionStatus]:
    """Per partition: retained range and end offset, speed position, batch watermark."""
    from loglake.kafka_admin import dataset_state
    from loglake.ledger import watermarks

    parts = dataset_state(config, ds)
    marks = watermarks(config, ds, {s.partition: s.earliest for s in parts})
    return [PartitionStatus(s.partition, s.earliest, s.end, s.speed_position, marks.get(s.partition))
            for s in parts]


def format_status(ds: Dataset, parts: list[PartitionStatus]) -> list[str]:
    lines = [f"{ds.name} ({ds.topic}):"]
    for s in parts:
        pos = "-" if s.speed_position is None else s.speed_position
        wm = "-" if s.watermark is None else s.watermark
        lag = "-" if s.speed_lag is None else s.speed_lag
        lines.append(f"  [{s.partition}] end {s.end}  speed position {pos} (lag {lag})  batch watermark {wm} "
                     f"(behind {s.batch_lag})")
    return lines
