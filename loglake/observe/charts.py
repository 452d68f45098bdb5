"""The loglake page's charts: how a dataset's layers moved over the last hours, as inline SVG
drawn on the server from its metrics series (``loglake.observe.series``): no script, no CDN,
readable in a browser without internet.

``dataset_charts(config, name, hours)`` gives four charts (drawn over the window since their
first point when that is shorter): the speed layer's lag in seconds
and the batch watermark's lag in records (the exporter's samples), records and quarantined
records per minute, and micro-batch durations (the stream's events). Each ``<svg>`` carries
``data-chart`` and ``data-points`` (how many points it drew), each point's ``<circle>`` or
bar its ``data-t`` and ``data-value``, so a test reads what is drawn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape

from loglake.core.config import Config
from loglake.observe import series

W, H = 360, 140          # the chart's size
LEFT, BOTTOM, TOP = 44, 20, 18


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    unit: str
    points: list[tuple[float, float]]  # (epoch seconds, value)
    bars: bool = False
    second: list[tuple[float, float]] | None = None  # a second series, drawn in red (quarantined)

    def svg(self, since: float, until: float) -> str:
        values = [v for _t, v in self.points] + [v for _t, v in (self.second or [])]
        top = max(values) if values and max(values) > 0 else 1.0
        span = max(until - since, 1.0)

        def x(t: float) -> float:
            return LEFT + (t - since) / span * (W - LEFT - 6)

        def y(v: float) -> float:
            return TOP + (1 - v / top) * (H - TOP - BOTTOM)

        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
                 f'class="chart" data-chart="{self.key}" data-points="{len(self.points)}" role="img" '
                 f'aria-label="{escape(self.title)}">',
                 f'<text x="{LEFT}" y="12" font-size="12" fill="#1a202c">{escape(self.title)}</text>',
                 f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - 4}" y2="{H - BOTTOM}" stroke="#a0aec0"/>',
                 f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="#a0aec0"/>',
                 f'<text x="{LEFT - 4}" y="{TOP + 4}" font-size="10" text-anchor="end" fill="#4a5568">'
                 f'{_short(top)}{escape(self.unit)}</text>',
                 f'<text x="{LEFT - 4}" y="{H - BOTTOM}" font-size="10" text-anchor="end" fill="#4a5568">0</text>',
                 f'<text x="{LEFT}" y="{H - 5}" font-size="10" fill="#4a5568">{_clock(since)}</text>',
                 f'<text x="{W - 4}" y="{H - 5}" font-size="10" text-anchor="end" fill="#4a5568">{_clock(until)}</text>']
        if not self.points:
            parts.append(f'<text x="{(W + LEFT) / 2}" y="{H / 2}" font-size="11" text-anchor="middle" '
                         f'fill="#718096">nothing recorded in this window</text>')
        for points, colour in ((self.points, "#2b6cb0"), (self.second or [], "#c53030")):
            if self.bars:
                width = max(2.0, (W - LEFT - 6) / max(span / 60, 1) - 1)
                for t, v in points:
                    left = max(x(t), LEFT + 1)  # a minute begun before the window, or not ended yet: clipped
                    wide = max(1.0, min(width, W - 6 - left))
                    parts.append(f'<rect x="{left:.1f}" y="{y(v):.1f}" width="{wide:.1f}" '
                                 f'height="{H - BOTTOM - y(v):.1f}" fill="{colour}" fill-opacity="0.7" '
                                 f'data-t="{t:.0f}" data-value="{v:g}"/>')
            else:
                if len(points) > 1:
                    line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
                    parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
                for t, v in points:
                    parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2" fill="{colour}" '
                                 f'data-t="{t:.0f}" data-value="{v:g}"/>')
        parts.append("</svg>")
        return "".join(parts)


def _short(v: float) -> str:
    for bound, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= bound:
            return f"{v / bound:.1f}{suffix}"
    return f"{v:.3g}"


def _clock(t: float) -> str:
    return time.strftime("%H:%M", time.gmtime(t)) + " UTC"


def dataset_charts(config: Config, name: str, hours: float = 6.0, now: float | None = None) -> list[Chart]:
    """The four charts of dataset ``name`` over the last ``hours``."""
    now = time.time() if now is None else now
    since = now - hours * 3600
    evts = [e for e in series.events(config, name, since) if e.get("kind") != "base"]
    samples = [e for e in evts if e["kind"] == "sample"]
    batches = [e for e in evts if e["kind"] == "micro_batch"]
    per_minute = series.rate_per_minute(evts, "micro_batch", lambda e: e.get("records", 0), since, now)
    bad_minute = series.rate_per_minute(evts, "micro_batch", lambda e: sum((e.get("quarantined") or {}).values()),
                                        since, now)
    return [
        Chart("speed_lag_seconds", "speed layer lag", " s",
              [(e["t"], e["speed_lag_seconds"]) for e in samples if e.get("speed_lag_seconds") is not None]),
        Chart("batch_lag_records", "batch watermark lag (records)", "",
              [(e["t"], e["batch_lag_records"]) for e in samples if e.get("batch_lag_records") is not None]),
        Chart("records_per_minute", "records per minute (red: quarantined)", "",
              [(t, v) for t, v in per_minute if v], bars=True, second=[(t, v) for t, v in bad_minute if v]),
        Chart("micro_batch_seconds", "micro-batch durations", " s", [(e["t"], e["seconds"]) for e in batches]),
    ]


def charts_html(config: Config, name: str, hours: float = 6.0, now: float | None = None) -> str:
    """The charts of ``name`` as one block of inline SVG, over the last ``hours`` or since the
    first point drawn when that is later (a new deployment's first minutes fill the width)."""
    now = time.time() if now is None else now
    charts = dataset_charts(config, name, hours, now)
    first = [t for c in charts for t, _v in c.points + (c.second or [])]
    since = max(now - hours * 3600, min(first) - 60) if first else now - hours * 3600
    return "".join(c.svg(since, now) for c in charts)
