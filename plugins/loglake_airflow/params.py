"""The manual DAGs' run parameters: typed ``Param``s that render as the trigger form.

JSON-schema constraints reject malformed input when the run is triggered (form, REST
API: 400); what needs the configuration or the log (the dataset exists, a partition
exists, end within the log end, start <= end) is checked by the task, before any Spark
job, with the same field names.
"""

from __future__ import annotations

from airflow.sdk import Param

from loglake_airflow.datasets import dataset_names

# PARTITION:START-END, non-negative integers; the half-open range [START, END).
RANGE_PATTERN = r"^\s*\d+\s*:\s*\d+\s*-\s*\d+\s*$"


def dataset_param(description: str) -> Param:
    """The form's dataset: a list to choose from when the configured datasets are known
    (``LOGLAKE_DATASETS``; the first is the default), else a name the task checks against
    the configuration. ``description`` says what the DAG does with it."""
    names = dataset_names()
    choice = {"enum": names} if names else {"minLength": 1}
    return Param(names[0] if names else None, type="string", title="Dataset", description=description, **choice)


def backfill_params() -> dict[str, Param]:
    return {
        "dataset": dataset_param("The dataset whose batch table is recomputed (conf/datasets/<name>.yaml)."),
        "ranges": Param(
            None, type=["null", "array"], items={"type": "string", "pattern": RANGE_PATTERN}, title="Offset ranges",
            description="One per line: PARTITION:START-END, the offsets [START, END) of one partition, "
                        "e.g. 0:100-200. Leave empty to give a time window (From/To) instead.",
        ),
        "from_ts": Param(
            None, type=["null", "string"], format="date-time", title="From (time)",
            description="Start of a time window, ISO-8601, inclusive. Kafka's offsets-for-times turns it "
                        "into an offset per partition. Use with To, instead of offset ranges.",
        ),
        "to_ts": Param(
            None, type=["null", "string"], format="date-time", title="To (time)",
            description="End of the time window, ISO-8601, exclusive.",
        ),
        "dry_run": Param(
            False, type="boolean", title="Dry run",
            description="Only print the plan (which offsets would be recomputed); run no Spark job.",
        ),
    }
