"""Hooks: spark-submit that also keeps what a loglake job reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook


class SummarySparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` that keeps the last JSON object line the job printed.

    loglake's jobs end by printing one JSON summary line on stdout (records,
    quarantined, seconds, ...); every line is still logged as the parent hook does.
    """

    summary: dict[str, Any] | None = None

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        super()._process_spark_submit_log(self._keep_summary(itr))

    def _keep_summary(self, itr: Iterator[Any]) -> Iterator[Any]:
        for line in itr:
            text = line.strip()
            if text.startswith("{") and text.endswith("}"):
                try:
                    value = json.loads(text)
                except ValueError:
                    value = None
                if isinstance(value, dict):
                    self.summary = value
            yield line
