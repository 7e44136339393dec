"""PNG plots for reports: a result set's (latency CDFs, writes by kind, polling, recovery) and
the scenarios' figures (end-txn cost vs participants, recovery vs log length and open txns,
empty reads vs blocked time).

A scenario describes its figures as data (:data:`Figure`, JSON-able, kept in
``scenarios.json``) and :func:`render_figures` draws any of them, so a report rebuilt from
saved scenarios draws the same plots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.measure import histogram_from_summary
from engine.ports import RecoveryStats

# A figure: {"file": "x.png", "title": str, "x": axis label, "x_scale": "linear"|"log"|"log2",
#            "panels": [{"title": str, "y": axis label, "y_scale": "linear"|"log"|"symlog",
#                        "lines": {label: [[x, y], ...]}}]}
Figure = dict[str, Any]

CDF_METRICS = ("publish_txn_us", "dispatch_nontxn_us", "dispatch_txn_us", "commit_to_visible_us", "end_txn_us")
WRITE_KINDS = (("data", "ledger.appends.data"), ("markers", "ledger.appends.marker"), ("txn log", "tc.log_appends"),
               ("snapshots", "snapshot.writes"), ("pending-ack log", "pending_ack.appends"), ("metadata", "meta.writes"))
# Re-read rates while blocked at maxReadPosition, for the polling plot's reference lines.
POLLING_RATES = (("Pulsar 10 ms re-read: 100/s", 100.0), ("pre-2024 spin (20 µs empty read): 50,000/s", 50_000.0))


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    _pyplot().close(fig)
    return path.name


def _scale(ax: Any, axis: str, scale: str) -> None:
    setter = ax.set_xscale if axis == "x" else ax.set_yscale
    if scale == "log2":
        setter("log", base=2)
    elif scale == "symlog":  # a log axis that also shows zero (e.g. notify's empty reads)
        setter("symlog", linthresh=1)
    else:
        setter(scale)


def render_figures(figures: list[Figure], out: Path) -> list[str]:
    """Draw each figure (panels side by side, one line per label); returns the file names."""
    plt = _pyplot()
    files = []
    for f in figures:
        panels = f["panels"]
        fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
        for ax, panel in zip(axes[0], panels):
            for label, points in panel["lines"].items():
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, marker="o", markersize=3, label=label)
            _scale(ax, "x", f.get("x_scale", "linear"))
            _scale(ax, "y", panel.get("y_scale", "linear"))
            ax.set_xlabel(f["x"])
            ax.set_ylabel(panel["y"])
            ax.set_title(panel.get("title", ""), fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f["title"])
        files.append(_save(fig, out / f["file"]))
    return files


def result_set_plots(rs: dict[str, Any], out: Path) -> list[str]:
    """The plots of one loaded result set (``bench.results.load``), for the engines it ran."""
    labels = list(rs["manifest"].get("runs", {}))
    files = [_cdf(rs, labels, name, out) for name in CDF_METRICS]
    files.append(_writes(rs, labels, out))
    files.append(_polling(rs, labels, out))
    files.append(_recovery(rs, labels, out))
    return [f for f in files if f]


def _cdf(rs: dict[str, Any], labels: list[str], name: str, out: Path) -> str | None:
    have = [(lab, rs["latency"].get(lab, {}).get(name)) for lab in labels]
    have = [(lab, s) for lab, s in have if s and s["count"]]
    if not have:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    qs = [i / 2 for i in range(1, 200)] + [99.9, 99.99, 100.0]
    for lab, s in have:
        h = histogram_from_summary(s)
        ax.plot([h.get_value_at_percentile(q) / 1000 for q in qs], [q / 100 for q in qs], label=lab)
    ax.set_xscale("log")
    ax.set_xlabel("ms (log)")
    ax.set_ylabel("fraction ≤ x")
    ax.set_title(f"CDF of {name[:-3]}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _save(fig, out / f"cdf_{name[:-3]}.png")


def _bars(title: str, ylabel: str, groups: list[str], values: dict[str, list[float]], path: Path) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(values))
    for i, (lab, vals) in enumerate(values.items()):
        ax.bar([j + i * width for j in range(len(groups))], vals, width, label=lab)
    ax.set_xticks([j + width * (len(values) - 1) / 2 for j in range(len(groups))], groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    return _save(fig, path)


def _writes(rs: dict[str, Any], labels: list[str], out: Path) -> str:
    values = {lab: [rs["counts"].get(lab, {}).get(k, 0) for _, k in WRITE_KINDS] for lab in labels}
    return _bars("Writes by kind", "writes", [name for name, _ in WRITE_KINDS], values, out / "writes.png")


def _polling(rs: dict[str, Any], labels: list[str], out: Path) -> str | None:
    """Empty dispatcher reads against the time spent blocked at maxReadPosition, one point per
    engine, beside the rates of Pulsar's re-read policies (notify: no empty reads at all)."""
    points = {lab: (rs["counts"].get(lab, {}).get("dispatch.blocked_us", 0) / 1e6,
                    rs["counts"].get(lab, {}).get("dispatch.empty_reads", 0)) for lab in labels}
    if not any(blocked for blocked, _ in points.values()):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    longest = max(blocked for blocked, _ in points.values())
    for name, rate in POLLING_RATES:
        ax.plot([0, longest], [0, rate * longest], linestyle="--", linewidth=1, label=name)
    for lab, (blocked, empty) in points.items():
        ax.plot([blocked], [empty], marker="o", markersize=8, linestyle="none", label=f"{lab}: {empty:,} in {blocked:,.1f} s")
    _scale(ax, "y", "symlog")
    ax.set_xlabel("time blocked at maxReadPosition (s, summed over dispatchers)")
    ax.set_ylabel("empty dispatcher reads")
    ax.set_title("Empty reads vs blocked time")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out / "polling.png")


def _recovery(rs: dict[str, Any], labels: list[str], out: Path) -> str | None:
    """Entries replayed plus records read at recovery, by component kind (``tb``,
    ``pending-ack``, ``tc``), summed over the run's crashes; none when nothing was read."""
    kind = RecoveryStats.kind_of
    kinds = sorted({kind(r["component"]) for r in rs["recovery"]})
    values = {lab: [sum(r["entries_replayed"] + r["records_read"] for r in rs["recovery"]
                        if r["engine"] == lab and kind(r["component"]) == k) for k in kinds] for lab in labels}
    if not any(any(v) for v in values.values()):
        return None
    return _bars("Recovery: entries replayed + records read", "entries + records", kinds, values, out / "recovery.png")

