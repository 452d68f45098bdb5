"""What a bench run writes: one PNG chart per metric, the markdown table, the results file.

A metric is the dict ``bench.harness.result`` builds; ``bench/run.py`` draws its ``chart``,
writes every metric to ``bench/results/<date>.json`` and prints the table.
"""

from __future__ import annotations

import json
from pathlib import Path


def draw_chart(metric: dict, path: Path, machine_line: str) -> Path | None:
    """A PNG for one metric's ``chart`` spec; None when it has none."""
    spec = metric.get("chart")
    if not spec:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = spec["panels"] if spec["kind"] == "panels" else [spec]
    widths = [p.get("width", 5.5) for p in panels]  # inches; a panel may ask for more
    fig, axes = plt.subplots(1, len(panels), figsize=(sum(widths), spec.get("height", 4)), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for ax, p in zip(axes[0], panels):
        if p["kind"] == "hbar":
            _hbar(ax, p)
            continue
        if p["kind"] == "bar":
            bars = ax.bar(p["labels"], p["values"], color=p.get("colors"))
            ax.bar_label(bars, labels=[_short(v) for v in p["values"]], fontsize=8)
            ax.tick_params(axis="x", labelrotation=p.get("rotate", 0), labelsize=8)
        else:
            for label, ys in p["series"].items():
                ax.plot(p["x"], ys, marker="o", label=label)
                for x, y in zip(p["x"], ys):
                    ax.annotate(_short(y), (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
            if p.get("logx"):
                ax.set_xscale("log")
            ax.set_xticks(p["x"], [str(x) for x in p.get("xticklabels", p["x"])])
            ax.set_xlabel(p.get("xlabel", ""))
            ax.legend(fontsize=8)
        if p.get("goal") is not None:
            ax.axhline(p["goal"], color="grey", linestyle="--", linewidth=1, label="goal")
        ax.set_ylabel(p.get("ylabel", ""))
        ax.set_title(p.get("title", ""), fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{metric['id']} {metric['title']}\n{machine_line}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _hbar(ax, p: dict) -> None:
    """Horizontal bars, one per label, each a stack of segments starting at ``left`` (0 by default)."""
    y = list(range(len(p["labels"])))
    start = [v or 0 for v in p.get("left") or [0] * len(y)]
    left = list(start)
    colors = p.get("colors") or {}
    for name, values in p["segments"].items():
        values = [v or 0 for v in values]
        if any(values):
            ax.barh(y, values, left=left, label=name, height=0.7, color=colors.get(name))
        left = [a + b for a, b in zip(left, values)]
    notes = p.get("notes") or [_short(end - s) for s, end in zip(start, left)]  # by default each bar's length
    for yi, end, note in zip(y, left, notes):
        ax.annotate(note, (end, yi), textcoords="offset points", xytext=(3, -3), fontsize=7)
    ax.set_yticks(y, p["labels"], fontsize=7)
    ax.invert_yaxis()
    if p.get("goal") is not None:
        ax.axvline(p["goal"], color="grey", linestyle="--", linewidth=1, label="goal")
    ax.set_xlabel(p.get("xlabel", ""))
    ax.set_title(p.get("title", ""), fontsize=9)
    ax.set_xlim(0, max(left, default=0) * 1.12 or None)  # room for the notes
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, frameon=False)


def _short(v: float) -> str:
    if v is None:
        return ""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.2f}M"
    if a >= 1e4:
        return f"{v / 1e3:.0f}k"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}"


def fmt(v, unit: str) -> str:
    if v is None:
        return "—"
    if unit in ("records/s",):
        return f"{v:,.0f} {unit}"
    if unit in ("ratio", "x"):
        return f"{v:.2f}{'×' if unit == 'x' else ''}"
    return f"{v:,.2f} {unit}" if isinstance(v, float) else f"{v:,} {unit}"


def table(metrics: list[dict]) -> str:
    """The markdown table of a run (also what ``make bench`` prints)."""
    lines = ["| Metric | Value | Goal | Met | Reference / detail |", "|---|---|---|---|---|"]
    for m in metrics:
        met = {True: "yes", False: "**no**", None: "—"}[m.get("met")]
        ref = m.get("summary") or ", ".join(f"{k}: {v}" for k, v in m.get("reference", {}).items())
        lines.append(f"| {m['id']} {m['title']} | {fmt(m['value'], m['unit'])} | {m.get('goal') or '—'} | {met} | {ref} |")
    return "\n".join(lines)


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
