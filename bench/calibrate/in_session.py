"""``txnbench validate --calibrate``: the model's profile measured on the broker validate then runs
the trace through, in the same broker session, just before its measured runs.

Calibration and validation on separate brokers disagreed by the machine's state as much as by the
model's: ten minutes apart, a fresh broker's saturated rates doubled (calibrate's 600 v4 / 40 v5
txn/s at 23:48, validate's 905-1,490 / 83-91 from 00:01, 2026-11-26; datasets/validation/README.md).
Here the calibration (:func:`bench.calibrate.calibrate.calibrate`, its probes and its saturation
trace) runs first; after the broker's measured runs, its saturation trace runs again
(:meth:`InSession.recheck`), so the section says how far the broker moved while it was judged:
on 2026-11-27, v4 -25 and +5 % within a session, v5 what its store's history explains but for -2
and -11 % (datasets/validation/README.md, "In the broker's session").
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench.pulsar.target import PulsarTarget
from engine.profile import LatencyProfile

Say = Callable[[str], None]


@dataclasses.dataclass
class InSession:
    """What ``bench.pulsar.validate_run.run_validate`` calls for ``--calibrate``
    (its ``calibration``): :meth:`profile` after the broker's restart, :meth:`recheck` after its
    measured runs."""

    target: PulsarTarget
    samples: int
    command: str
    name: str
    warm_up_txns: dict[str, int] | None = None
    warm_up_jit: float | None = None
    _record: dict[str, Any] | None = None  # the calibration's saturation measurement
    _profile: LatencyProfile | None = None
    _done_at: float = 0.0

    def profile(self, into: Path, say: Say, fresh: bool) -> LatencyProfile:
        """Calibrate on the broker (``fresh``: restarted with its data wiped first, as calibrate
        --fresh-broker does); the profile, written to ``into/profile.json``."""
        from bench.calibrate.calibrate import calibrate

        broker_dir = str(self.target.pulsar_dir) if self.target.pulsar_dir else None
        prof = calibrate(redis=None, kafka=None, pulsar=self.target.service_url, admin_url=self.target.admin_url,
                         samples=self.samples, out=str(into / "profile.json"), name=self.name, command=self.command,
                         progress=say, fresh_broker=fresh, pulsar_dir=broker_dir,
                         client_warm_up=self.target.client_warm_up, warm_up_txns=self.warm_up_txns,
                         warm_up_jit=self.warm_up_jit)
        self._record = prof.provenance["extra"]["pulsar.saturation"]
        self._done_at = time.monotonic()
        self._profile = prof
        return prof

    def recheck(self, say: Say) -> dict[str, Any]:
        """The calibration's saturation trace again, as it ran then (its rows as many times over):
        the broker's rates now beside the calibration's. v5's falls with the txns its store holds
        (``txns_before``), which the measured runs added to; v4's does not: so the calibrated model's
        v5 rate at each measurement's history (``saturation.median_history``) is recorded beside
        them, what the history alone explains."""
        from bench.calibrate import saturation

        prof = self._profile
        if self._record is None or prof is None:
            raise RuntimeError("InSession.recheck before profile")
        before = self._record
        scratch = Path(tempfile.mkdtemp(prefix="txnbench-recheck-"))
        try:
            say("calibration: its saturation trace again, after the measured runs")
            traces = saturation.traces_of(before, scratch)  # writes scratch/saturation.parquet, the rows once
            # a run whose client lost its connection is left out: the measured runs are done by now
            after = saturation.measure(self.target, scratch, say, traces, scratch / "saturation.parquet", tolerate=True)
            model = {}
            for when, rec in (("before", before), ("after", after)):
                if "v5" not in rec.get("committed_txns_per_s", {}):
                    continue
                history = saturation.median_history(rec)
                rate = saturation.model_rates(prof, dict(prof.resources), traces["v5"], ("v5",), history)["v5"]
                model[when] = {"history": history, "committed_txns_per_s": round(rate, 1)}
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        keep = ("committed_txns_per_s", "runs", "txns_before", "repeat", "failed_runs")
        return {"profile": "profile.json", "minutes_after_calibration": round((time.monotonic() - self._done_at) / 60, 1),
                "saturation_before": {k: before[k] for k in keep if k in before},
                "saturation_after": {k: after[k] for k in keep if k in after}, "model_v5": model}
