"""``loglake replay DATASET [--reason-code CODE] [--dry-run]``: re-admit quarantined records.

After a rule was loosened, the quarantined records the current config accepts move into
their layer's table exactly once (``spark_jobs/replay.py`` does the work, under the
dataset's writer lease); this side launches the job and says what moved and what stays,
by reason. No Spark here: the CLI and the loglake_replay DAG share it.
"""

from __future__ import annotations

from typing import Callable

from loglake.core.config import Config, Dataset
from loglake.core.errors import ParamError
from loglake.jobs.launch import run_job
from loglake.jobs.requests import ReplayRequest
from loglake.jobs.summaries import ReplaySummary


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{code} {n}" for code, n in sorted(counts.items())) or "none"


def moved_and_stay(summary: ReplaySummary, layer: str) -> tuple[dict[str, int], dict[str, int]]:
    """By reason: the records of ``layer`` that moved (would move, in a dry run) and those that stay."""
    counts = getattr(summary, layer)
    valid, invalid = dict(counts["valid"]), dict(counts["invalid"])
    if layer == "batch" and not summary.dry_run and summary.batch_published is False:
        # A gate that refused the recompute swapped nothing in: every record stays.
        return {}, {c: valid.get(c, 0) + invalid.get(c, 0) for c in valid.keys() | invalid.keys()}
    return valid, invalid


def replay_lines(summary: ReplaySummary) -> list[str]:
    """What a replay did, in words: per layer, moved and staying records by reason."""
    name, dry = summary.dataset, summary.dry_run
    verb = "would move" if dry else "moved"
    only = f" (reason {summary.reason_code} only)" if summary.reason_code else ""
    lines = []
    for layer in ("speed", "batch"):
        moved, stay = moved_and_stay(summary, layer)
        lines.append(f"replay {name} {layer}{only}: {verb} {sum(moved.values())} ({_counts(moved)}); "
                     f"{sum(stay.values())} stay quarantined ({_counts(stay)})")
    if summary.batch_ranges:
        ranges = " ".join(summary.batch_ranges)
        if dry:
            lines.append(f"replay {name} batch: would recompute {ranges} through the quality gate")
        elif summary.batch_published:
            lines.append(f"replay {name} batch: recomputed {ranges}; the quality gate published it "
                         f"(run {summary.run_id})")
        else:
            failed = ", ".join(f"{f.expectation}({f.column})" for f in summary.quality.failed
                               ) if summary.quality else ""
            failed = failed or "see the run"
            lines.append(f"replay {name} batch: recomputed {ranges} but the quality gate refused it ({failed}): "
                         f"nothing moved there; the served rows are unchanged")
    return lines


def run_replay(config: Config, ds: Dataset, run_id: str, reason_code: str | None = None, dry_run: bool = False,
               say: Callable[[str], None] = print) -> ReplaySummary:
    """Run the replay job for ``ds``; say one line per layer; the job's summary."""

    if reason_code is not None and not reason_code.strip():
        raise ParamError("reason_code", "a quarantine reason code such as out_of_domain (docs/configuration.md: "
                                        "Quarantine reasons), or leave it out for every reason")
    outcome = run_job(config, ReplayRequest(ds.name, run_id=run_id, reason_code=reason_code or None,
                                         dry_run=dry_run))
    if not outcome.ok:
        raise outcome.error(ds.name)
    for line in replay_lines(outcome.summary):
        say(line)
    return outcome.summary
