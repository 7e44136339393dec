"""The broker client's events file of a run (``pulsar-events-<design>.jsonl``, bench.pulsar.run):
its lines read back as the report needs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


def events(path: Path, marker: str) -> Iterator[dict[str, Any]]:
    """Each event of ``path`` whose line holds ``marker`` (most lines are other ops and
    deliveries: not decoded), skipping a line a client killed mid-write left half-written (the
    run failed on it already, bench.pulsar.client); nothing when the file is not there."""
    if not path.exists():
        return
    with path.open() as f:
        for line in f:
            if marker not in line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
