"""Server-side HTML of the loglake page, from ``DatasetStatus.to_dict()`` values.

The markup is in ``templates/`` (Jinja2, autoescaped). Every number sits in an element
with ``data-dataset``, ``data-partition`` (or ``data-table``) and ``data-field``
attributes and its raw value in ``data-value``, so a test or a script reads exactly what
is shown. Formatting comes from ``loglake.ops.status``,
the same text ``loglake status`` prints.
"""

from __future__ import annotations

import functools
from pathlib import Path

DAG_IDS = ("loglake_batch", "loglake_backfill", "loglake_maintenance", "loglake_accept_loss", "loglake_rebuild",
           "loglake_replay")

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #1a202c; }
h1 { font-size: 20px; margin: 0 0 8px; } h2 { font-size: 16px; margin: 24px 0 4px; }
nav a { margin-right: 12px; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid #cbd5e0; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #edf2f7; white-space: normal; max-width: 7em; font-size: 12px; } td.text, th.text { text-align: left; }
.ok { color: #276749; } .bad { color: #c53030; font-weight: 600; } .muted { color: #718096; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; margin: 4px 0; }
dt { color: #4a5568; }
.charts { display: flex; flex-wrap: wrap; gap: 8px; margin: 6px 0; } .charts svg { border: 1px solid #e2e8f0; }
"""

# (field, column title); the partition row's cells, in order.
PARTITION_FIELDS = (
    ("earliest", "earliest offset"), ("end", "log end offset"), ("speed_position", "speed position"),
    ("speed_lag", "speed lag (records)"), ("lag_seconds", "speed lag (time)"), ("watermark", "batch watermark"),
    ("batch_lag", "batch lag (records)"), ("oldest_unprocessed", "oldest unprocessed offset"),
    ("retention_seconds", "retention deletes it in"),
)

# The navigation icon (Airflow shows it next to the "loglake" entry): a log of records.
ICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="currentColor" '
        'stroke-width="2"><rect x="3" y="4" width="18" height="16" rx="2"/><path d="M7 9h10M7 13h10M7 17h6"/>'
        '</svg>')


@functools.cache
def _templates():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
    from markupsafe import Markup

    from loglake.ledger.results import AuditRecord, QualityRecord
    from loglake.schema_versions import format_text, schema_text
    from loglake.ops.status import (audit_text, erasure_text, format_duration, lost_text, quality_text,
                                    retention_text, writer_text)

    env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                      autoescape=select_autoescape(["html"]), undefined=StrictUndefined)

    def shown(field: str, value) -> str:
        if value is None:
            return "-"
        return format_duration(value) if field in ("lag_seconds", "retention_seconds") else str(value)

    env.globals.update(css=Markup(CSS), dag_ids=DAG_IDS, partition_fields=PARTITION_FIELDS, shown=shown,
                       retention_text=retention_text,
                       # The page's values are DatasetStatus.to_dict()'s: read back into the records.
                       quality_text=lambda q: quality_text(QualityRecord.from_dict(q)),
                       audit_text=lambda a: audit_text(AuditRecord.from_dict(a)),
                       writer_text=writer_text, lost_text=lost_text, format_text=format_text, schema_text=schema_text,
                       erasure_text=erasure_text,
                       state_class=lambda state: {"published": "ok", "ok": "ok", "failed": "bad"}.get(state, "muted"))
    return env


def render_page(datasets: list[dict], root: str, charts: dict[str, str] | None = None) -> str:
    """The whole page; ``root`` is the app's mount path (``/loglake``, behind any base URL);
    ``charts``: each dataset's inline SVG charts (``loglake.observe.charts.charts_html``)."""
    from markupsafe import Markup

    base = root[: -len("/loglake")] if root.endswith("/loglake") else ""
    drawn = {name: Markup(svg) for name, svg in (charts or {}).items()}  # made by loglake, not from input
    return _templates().get_template("page.html").render(datasets=datasets, root=root, base=base, charts=drawn)


def no_docs_page(site) -> str:
    return _templates().get_template("no_docs.html").render(site=str(site))
