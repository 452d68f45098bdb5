"""Server-side HTML of the loglake page, from ``DatasetStatus.to_dict()`` values.

Every number sits in an element with ``data-dataset``, ``data-partition`` (or
``data-table``) and ``data-field`` attributes and its raw value in ``data-value``, so a
test or a script reads exactly what is shown. Formatting comes from ``loglake.status``,
the same text ``loglake status`` prints.
"""

from __future__ import annotations

from html import escape

from loglake_airflow.ui import DAG_IDS

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


def _cell(ds: str, part: int, fld: str, value) -> str:
    from loglake.status import format_duration

    if value is None:
        shown = "-"
    elif fld in ("lag_seconds", "retention_seconds"):
        shown = format_duration(value)
    else:
        shown = str(value)
    raw = "" if value is None else str(value)
    cls = ' class="bad"' if fld == "retention_seconds" and value is not None and value < 3600 else ""
    return (f'<td data-dataset="{escape(ds)}" data-partition="{part}" data-field="{fld}" '
            f'data-value="{escape(raw)}"{cls}>{escape(shown)}</td>')


def _summary(d: dict) -> str:
    from loglake.status import audit_text, quality_text, retention_text

    name = escape(d["name"])
    q, a = d["quality"], d["audit"]
    q_state = "none" if q is None else ("published" if q["published"] else "failed")
    a_state = "none" if a is None else ("ok" if a["ok"] else "failed")
    retention = retention_text(d["retention_ms"], d["cleanup_policy"])

    def cls(state: str) -> str:
        return {"published": "ok", "ok": "ok", "failed": "bad"}.get(state, "muted")

    return (f'<dl><dt>kind</dt><dd>{escape(d["kind"])}</dd>'
            f'<dt>retention</dt><dd data-dataset="{name}" data-field="retention_ms" '
            f'data-value="{"" if d["retention_ms"] is None else d["retention_ms"]}">{escape(retention)}</dd>'
            f'<dt>last quality</dt><dd data-dataset="{name}" data-field="quality" data-value="{q_state}" '
            f'class="{cls(q_state)}">{escape(quality_text(q))}</dd>'
            f'<dt>last audit</dt><dd data-dataset="{name}" data-field="audit" data-value="{a_state}" '
            f'class="{cls(a_state)}">{escape(audit_text(a))}</dd></dl>')


def _tables(d: dict) -> str:
    name = escape(d["name"])
    rows = []
    for t in d["tables"]:
        cells = []
        for fld in ("version", "files"):
            v = t[fld]
            cells.append(f'<td data-dataset="{name}" data-table="{escape(t["layer"])}" data-field="{fld}" '
                         f'data-value="{"" if v is None else v}">{"-" if v is None else v}</td>')
        rows.append(f'<tr><td class="text">{escape(t["layer"])}</td><td class="text">{escape(t["name"])}</td>'
                    f'{"".join(cells)}</tr>')
    return ('<table><tr><th class="text">layer</th><th class="text">table</th><th>Delta version</th>'
            f'<th>files</th></tr>{"".join(rows)}</table>')


def _dataset(d: dict) -> str:
    name = escape(d["name"])
    head = f'<h2 data-dataset="{name}">{name} <span class="muted">(topic {escape(d["topic"])})</span></h2>'
    if "error" in d:
        return f'{head}<p class="bad" data-dataset="{name}" data-field="error">{escape(d["error"])}</p>'
    titles = "".join(f"<th>{escape(t)}</th>" for _f, t in PARTITION_FIELDS)
    rows = []
    for p in d["partitions"]:
        cells = "".join(_cell(d["name"], p["partition"], f, p[f]) for f, _t in PARTITION_FIELDS)
        rows.append(f'<tr data-dataset="{name}" data-partition="{p["partition"]}"><td>{p["partition"]}</td>'
                    f"{cells}</tr>")
    return (f'<section data-dataset="{name}">{head}{_summary(d)}'
            f'<table class="partitions"><tr><th>partition</th>{titles}</tr>{"".join(rows)}</table>'
            f"{_tables(d)}</section>")


def render_page(datasets: list[dict], root: str) -> str:
    """The whole page; ``root`` is the app's mount path (``/loglake``, behind any base URL)."""
    base = root[: -len("/loglake")] if root.endswith("/loglake") else ""
    links = " ".join(f'<a target="_top" href="{escape(base)}/dags/{d}">{d}</a>' for d in DAG_IDS)
    links += (f' <a target="_top" href="{escape(root)}/docs/">Data Docs</a>'
              f' <a href="{escape(root)}/api/status">JSON</a> <a href="{escape(root)}/">refresh</a>')
    body = "".join(_dataset(d) for d in datasets) or "<p>no datasets configured</p>"
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>loglake</title><style>{CSS}</style></head>'
            f'<body><h1>loglake: every layer, per partition</h1><nav>{links}</nav>{body}'
            '<p class="muted">Speed lag (time): age of the oldest record the speed layer has not processed. '
            "Retention: time until Kafka may delete the oldest offset that the speed or batch layer has not "
            "processed (its timestamp + retention.ms); - when nothing is unprocessed or nothing is deleted by "
            "age.</p></body></html>")


def no_docs_page(site) -> str:
    return ('<!doctype html><html><head><meta charset="utf-8"><title>loglake Data Docs</title>'
            f'<style>{CSS}</style></head><body><h1>No validation yet</h1><p>The Great Expectations Data Docs '
            "appear here after the first quality run (a <code>loglake_batch</code> or "
            f"<code>loglake_backfill</code> run builds them at <code>{escape(str(site))}</code>).</p>"
            "</body></html>")
