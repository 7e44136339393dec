"""What a scenario run leaves behind, ``scenarios.json``: its :class:`Scenario` records, how they
are saved and read back, and the report sections they make. :mod:`bench.scenarios.scenarios` writes it,
:mod:`bench.report.report` reads it (neither imports the other's side)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.report.plots import Figure
from bench.report.rows import Row

SECTION = "Review questions"


@dataclass
class Scenario:
    name: str
    question: str
    labels: list[str]
    rows: list[Row]
    command: str
    note: str = ""
    findings: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    figures: list[Figure] = field(default_factory=list)  # drawn by bench.report.plots.render_figures


def save(scenarios: list[Scenario], path: str | Path) -> Path:
    """Write ``scenarios.json``: every scenario's rows, findings and figures."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"scenarios": [{**asdict(s), "rows": [asdict(r) for r in s.rows]} for s in scenarios]}
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


def sections_of(scenarios: list[Scenario]) -> list[tuple[str, list[str], list[Row], str]]:
    """Report sections, one table per question: the note carries the reproducing command and findings."""
    out = []
    for s in scenarios:
        note = (f"Reproduce: `{s.command}`. {s.note} Findings: " + " ".join(s.findings)).strip()
        out.append((f"{SECTION}: {s.question}", s.labels, s.rows, note))
    return out


def load_figures(path: str | Path) -> list[Figure]:
    """The figures of a ``scenarios.json`` (for ``build_report``)."""
    return [f for s in json.loads(Path(path).read_text())["scenarios"] for f in s.get("figures", [])]


def load_sections(path: str | Path) -> list[tuple[str, list[str], list[Row], str]]:
    """Sections from a ``scenarios.json`` (for ``build_report``)."""
    data = json.loads(Path(path).read_text())
    scenarios = []
    for s in data["scenarios"]:
        rows = [Row(**r) for r in s["rows"]]
        scenarios.append(Scenario(**{**s, "rows": rows}))
    return sections_of(scenarios)
