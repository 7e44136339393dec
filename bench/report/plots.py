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

from bench.replay.measure import histogram_from_summary, values_at_percentiles
from bench.replay import registry

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
            lines = {label: points for label, points in panel["lines"].items() if points}
            for i, group in enumerate(identical_groups(lines)):
                xs, ys = zip(*lines[group[0]])
                ls, mk = STYLES[i % len(STYLES)]
                name = " = ".join(group) + (" (identical)" if len(group) > 1 else "")
                ax.plot(xs, ys, linestyle=ls, marker=mk, markersize=4, label=name)
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
    """The plots of one loaded result set (``bench.replay.results.load``), for the engines it ran."""
    labels = list(rs["manifest"].get("runs", {}))
    files = [_cdf(rs, labels, name, out) for name in CDF_METRICS]
    files.append(_writes(rs, labels, out))
    files.append(_polling(rs, labels, out))
    files.append(_recovery(rs, labels, out))
    return [f for f in files if f]


CDF_TITLES = {"publish_txn_us": "Publish latency in a txn", "dispatch_nontxn_us": "Dispatch latency, plain messages",
              "dispatch_txn_us": "Dispatch latency, txn messages", "commit_to_visible_us": "Commit to visible",
              "end_txn_us": "End-txn latency"}
# percentiles drawn, and the ticks OMB's charts label on their log(1/(1-p)) axis
CDF_PCTS = tuple([float(q) for q in range(1, 90)] + [90 + q / 10 for q in range(0, 99)] + [99.9, 99.95, 99.99])
CDF_TICKS = (50.0, 90.0, 99.0, 99.9, 99.99)
STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"), ((0, (1, 1)), "x"))


def _log_pct(q: float) -> float:
    """OMB's percentile axis: x = log10(1 / (1 - p)), so 90, 99, 99.9 sit one step apart."""
    import math

    return math.log10(1 / (1 - q / 100))


def identical_groups(series: dict[str, Any]) -> list[list[str]]:
    """Labels whose series are equal, in order (each group drawn once, named "identical")."""
    groups: list[list[str]] = []
    for lab, ys in series.items():
        for g in groups:
            if series[g[0]] == ys:
                g.append(lab)
                break
        else:
            groups.append([lab])
    return groups


def _cdf(rs: dict[str, Any], labels: list[str], name: str, out: Path) -> str | None:
    """Latency by percentile as OMB draws it: x = percentile on a log(1/(1-p)) axis, y = latency.
    Engines whose curves coincide are drawn once and named "identical" in the legend."""
    have = [(lab, rs["latency"].get(lab, {}).get(name)) for lab in labels]
    have = [(lab, s) for lab, s in have if s and s["count"]]
    if not have:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [_log_pct(q) for q in CDF_PCTS]
    series = {}
    for lab, s in have:
        h = histogram_from_summary(s)
        series[lab] = [v / 1000 for v in values_at_percentiles(h, CDF_PCTS)]
    for i, group in enumerate(identical_groups(series)):
        ls, mk = STYLES[i % len(STYLES)]
        label = " = ".join(group) + (" (identical)" if len(group) > 1 else "") + f", n={have[[lab for lab, _ in have].index(group[0])][1]['count']:,}"
        ax.plot(xs, series[group[0]], linestyle=ls, marker=mk, markevery=12, markersize=5, linewidth=1.6, label=label)
    ax.set_xticks([_log_pct(q) for q in CDF_TICKS], [f"p{q:g}" for q in CDF_TICKS])
    ax.set_xlabel("percentile (log scale of 1/(1-p), as OMB plots)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{CDF_TITLES.get(name, name)} by percentile ({name})")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
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
    return _bars("Writes by kind over the whole run (entries or records)", "writes (count)",
                 [name for name, _ in WRITE_KINDS], values, out / "writes.png")


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
    for i, (lab, (blocked, empty)) in enumerate(points.items()):  # distinct markers: the points often coincide
        ax.plot([blocked], [empty], marker=STYLES[i % len(STYLES)][1], markersize=10 - 2 * (i % 3), linestyle="none",
                fillstyle="none" if i else "full", label=f"{lab}: {empty:,} in {blocked:,.1f} s")
    _scale(ax, "y", "symlog")
    ax.set_xlabel("time blocked at maxReadPosition (s, summed over dispatchers)")
    ax.set_ylabel("empty dispatcher reads")
    ax.set_title("Polling waste: empty dispatcher reads vs time blocked")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out / "polling.png")


def _recovery(rs: dict[str, Any], labels: list[str], out: Path) -> str | None:
    """Entries replayed plus records read at recovery, by component kind (``tb``,
    ``pending-ack``, ``tc``), summed over the run's crashes; none when nothing was read."""
    kind = registry.kind_of
    kinds = sorted({kind(r["component"]) for r in rs["recovery"]})
    values = {lab: [sum(r["entries_replayed"] + r["records_read"] for r in rs["recovery"]
                        if r["engine"] == lab and kind(r["component"]) == k) for k in kinds] for lab in labels}
    if not any(any(v) for v in values.values()):
        return None
    return _bars("Recovery after the crash: entries replayed + records read, by component", "entries + records (count)",
                 kinds, values, out / "recovery.png")

