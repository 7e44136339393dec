"""A profile's resources fitted to the saturated rates validations kept on this machine:
``txnbench calibrate --refit PROFILE --rates-from DIR [--rates-from DIR ...]``. What calibrate's
own fit (``bench.calibrate.saturation``) does on one trace, done over several, with the host's
cores. Several folders pool their validations: sets measured on different days' brokers, whose
hops and rates drifted apart (a fifth on hops, up to 1.7x on v4's rate), so that the fit is not
one broker's.

On these 2-core machines a standalone broker's v4 rate at saturation is bound by the cores: over
its as-fast-as-possible runs the machine kept 1.8-1.95 of its 2 cores busy, about half of them the
broker's process (its bookie and metadata store inside it) and the rest the trace client's JVM
(``bench.pulsar.cpu``; ``datasets/validation/fresh-default-6``). The bookie fitted alone (each
append holding a slot for its latency, the concurrency that gives one trace's v4 rate) cannot carry
that over: many-participants does three times the core time per txn of omb or small, and no one
bookie concurrency met all three (session 31's refit).

So the cores become a resource of their own: each call of a kind in :data:`KINDS` works a fitted
time on one of the host's ``cores``, inside its latency (``engine.clock.ResourceSpec.kind_service_us``),
and waits for a free one. The fit, trace by trace over the kept validations:

- **per-txn cores**: over the broker's v4 runs as fast as possible, the machine's busy cores over
  the committed rate (µs of a core per committed txn), the median of its runs;
- **per-txn calls**: the model's v4 replay of the same rows (as many passes as the broker ran) as
  fast as possible counts the calls of each kind in :data:`KINDS` per committed txn;
- **costs**: non-negative least squares of the relative misfit, over every subset of the kinds,
  then scaled (among :data:`SCALES`) to the scale whose model v4 rates are nearest the broker's
  medians (squared log ratio, summed over the traces): the model's cores are never all busy, as
  a txn's calls wait on one another;
- **pinned costs** (``--core KIND=US``): a kind whose cost other evidence fixes keeps it, unscaled;
  the least squares fits the others to what is left of each run's core time. The per-txn calls
  of the three kinds nearly move together over these traces (rpc 27 per txn on small and omb, 41
  on many-participants; rpc.broker 3.3 and 12.5), so the split between them is weakly fixed by the
  rates alone. Fitted over ``fresh-default-6/`` to ``-8/``, rpc.broker came out 159 µs (258
  fitted freely over ``-6/`` alone), and the burst of 33 v4 END_TXNs at the end of omb's trace
  took the model 9.3 ms at the median (13.2 at 258), where four brokers answered it at 4.9-7.0
  (datasets/validation/README.md, session 34). ``dispatch.entry`` is alike: 34.7 a txn on
  many-participants, 11.4 on small and omb, so fitted freely it loses to the hops. The default
  pins both from ``benchmarks.txn_cpu`` (``dispatch.entry`` 50 µs, ``rpc.broker`` 100: a txn's
  further topic, its two hops among its work, cost the broker 200-210 µs) and fits the rest over
  ``-6/``: the v4 END_TXN crowd is met on more sets, and over the latency seeds 1-6 the v5/v4
  ratio on as many on average (sessions 39 and 48);
- **by process** (``--by-process``): the runs record the broker process's busy cores beside the
  machine's, so the least squares can fit each process by the kinds that work in it, a kind's
  cost then the sum of its sides: the broker's time by every kind, the rest of the machine's
  (the trace client's JVM) by :data:`CLIENT_KINDS`. ``rpc.broker`` works in the broker alone,
  and the machine-wide fit gives it more than the broker's process had (258 µs, 3.2 calls a txn
  on omb, where the process was busy 416 core-µs a txn); fitted by process it is 151 before
  the scale. The model's v4 rates then fit worse, so the default does not take it
  (``datasets/validation/README.md``, session 44);
- **bookie**: then the concurrency among :data:`BOOKIE_CONCURRENCY` (none: no bound) whose model
  v4 rates are nearest the broker's medians, the smaller on a tie within 1 %;
- **v5** is not fitted: its rate is bound by its metadata store's threads (the ``metadata``
  resource: RocksDB commits on its caller's thread, and the listings' walk holds it), which
  calibrate fits on its own saturation trace across the runs' histories; the fit gives v5's model
  rates beside the broker's, and the v5/v4 ratio, as a check.

The metadata writes' service time and the walk stay the profile's.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bench.calibrate import fit_notes
from bench.calibrate.kept_fit import distinct, refitted, saturated_replay, scratch, validations
from engine.clock import ResourceSpec
from engine.errors import ConfigError
from engine.profile import LatencyProfile

# What works on the host's cores per call, for both processes: a client request or answer (each
# side's Netty handling and the broker's command), the broker's own client's END_TXN_ON_PARTITION
# and END_TXN_ON_SUBSCRIPTION, a message pushed to a consumer (and received), and each entry a
# subscription's dispatcher passes (delivered, or acked past as a marker). An append's work
# goes with the request that makes it (the counts per message move together in every trace).
KINDS = ("rpc", "rpc.broker", "consumer.deliver", "dispatch.entry")
# Kinds that work in the trace client's process too: a request is sent and its answer read there,
# a pushed message received. The broker's own client (rpc.broker) and its dispatcher work only
# in the broker's.
CLIENT_KINDS = ("rpc", "consumer.deliver")
NOTE = fit_notes.RATES  # how its note begins
CORES = 2  # these machines' (../shared/FACTS.md); the validations record theirs as ``cores``
BOOKIE_CONCURRENCY = (21, 32, 48, 64, 96, 128, None)
SCALES = tuple(round(0.5 + 0.05 * i, 2) for i in range(21))  # of the least-squares costs: 0.5 to 1.5


@dataclasses.dataclass(frozen=True)
class KeptRun:
    """One kept validation's broker figures at saturation: what the fit reads."""
    name: str
    trace: Path
    repeat: dict[str, int]
    rates: dict[str, list[float]]  # per design, committed txn/s of each as-fast-as-possible run
    busy_cores: list[float]  # the machine's busy cores over each v4 run
    cores: int
    v5_history: int
    v5_listeners: int
    broker_cores: list[float] | None = None  # the broker process's, over each v4 run (None: not recorded)

    @property
    def core_us_per_txn(self) -> float:
        """The median over the v4 runs of a core's µs per committed txn."""
        return statistics.median(b * 1e6 / r for b, r in zip(self.busy_cores, self.rates["v4"]) if r)

    def process_core_us_per_txn(self) -> tuple[float, float]:
        """The same split by process: the broker's (its process's busy cores) and the rest of the
        machine's (the trace client's JVM, above all), each the median over the v4 runs."""
        assert self.broker_cores is not None
        runs = [(b, m, r) for b, m, r in zip(self.broker_cores, self.busy_cores, self.rates["v4"]) if r]
        return (statistics.median(b * 1e6 / r for b, _, r in runs),
                statistics.median((m - b) * 1e6 / r for b, m, r in runs))


def _saturated(v: dict[str, Any]) -> bool:
    """A validation that kept the broker's v4 runs at saturation and the machine's cores over them."""
    return bool((v.get("broker_saturation_cpu") or {}).get("v4") and (v.get("broker_saturation_runs") or {}).get("v4"))


def kept_runs(folder: Path, qualified: bool = False) -> list[KeptRun]:
    """Every validation in ``folder`` (``*.json``) with the broker's v4 runs at saturation and the
    machine's cores over them; its trace is ``folder``'s parent's ``NAME.parquet``. ``qualified``:
    each run named ``FOLDER/NAME`` (the same trace kept in several folders)."""
    runs = [KeptRun(name, trace, {d: int(n) for d, n in (v.get("saturation_repeat") or {}).items()},
                    v["broker_saturation_runs"], [c["machine_busy_cores"] for c in v["broker_saturation_cpu"]["v4"]],
                    int(v.get("cores", CORES)), int((v.get("model_v5_history") or {}).get("asap", 0)),
                    int((v.get("model_v5_listeners") or {}).get("asap", 0)),
                    _broker_cores(v["broker_saturation_cpu"]["v4"]))
            for name, trace, v in validations("--rates-from", folder, qualified, _saturated)]
    if not runs:
        raise ConfigError(f"calibrate --rates-from {folder}: no validation there records the broker's v4 runs at "
                          "saturation and the machine's busy cores over them (broker_saturation_cpu)")
    return runs


def _broker_cores(runs: list[dict[str, Any]]) -> list[float] | None:
    """The broker process's busy cores over each v4 run, or None unless every run recorded them."""
    cores = [c.get("broker_cores") for c in runs]
    return [float(c) for c in cores if c is not None] if all(c is not None for c in cores) else None


def nnls(rows: list[list[float]], targets: list[float]) -> list[float]:
    """Non-negative costs minimising the squared relative misfit of ``rows`` · costs to
    ``targets``: the best least-squares solution over every subset of the columns whose costs
    all come out >= 0 (a handful of columns: exhaustive)."""
    import numpy as np

    a = np.array([[x / t for x in row] for row, t in zip(rows, targets)])
    b = np.ones(len(targets))
    best: tuple[float, list[float]] | None = None
    n = a.shape[1]
    for size in range(1, n + 1):
        for cols in itertools.combinations(range(n), size):
            sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if (sol < 0).any():
                continue
            costs = [0.0] * n
            for c, s in zip(cols, sol):
                costs[c] = float(s)
            residual = a @ np.array(costs) - b
            misfit = float(residual @ residual)
            if best is None or misfit < best[0] - 1e-12:
                best = (misfit, costs)
    return best[1] if best is not None else [0.0] * n


def fit(profile: LatencyProfile, folders: Sequence[Path],
        progress: Callable[[str], None] = lambda s: None,
        pinned: Mapping[str, int] | None = None,
        by_process: bool = False) -> tuple[LatencyProfile, dict[str, Any], str]:
    """``profile`` with ``cpu`` and ``bookie`` fitted to the validations in ``folders`` (module
    doc), the kinds in ``pinned`` costing what it gives; ``by_process``: the least squares fits
    the broker's process and the rest of the machine apart, each by the kinds that work in it.
    Also the fit's record (``provenance.extra["pulsar.rates_fit"]``) and a note in words."""
    distinct("--rates-from", folders)
    pinned = dict(pinned or {})
    bad = [f"{kind}={us}" for kind, us in pinned.items() if kind not in KINDS or us < 0]
    if bad:
        raise ConfigError(f"calibrate --core {', '.join(bad)}: a kind of {', '.join(KINDS)} and µs >= 0")
    free = [k for k in KINDS if k not in pinned]
    if not free:
        raise ConfigError(f"calibrate --core: every kind pinned ({', '.join(KINDS)}): nothing left to fit")
    runs = [run for f in folders for run in kept_runs(f, qualified=len(folders) > 1)]
    cores = runs[0].cores
    if any(run.cores != cores for run in runs):
        raise ConfigError("calibrate --rates-from: the validations ran on hosts of different cores ("
                          + ", ".join(f"{run.name} {run.cores}" for run in runs) + "): one fit cannot hold them")
    where = ", ".join(str(f) for f in folders)
    unbound = {k: v for k, v in profile.resources.items() if k not in ("bookie", "cpu")}
    record: dict[str, Any] = {"from": str(folders[0]) if len(folders) == 1 else [str(f) for f in folders],
                              "cores": cores, "kinds": list(KINDS), "traces": {}}
    if pinned:
        record["core_us_pinned"] = pinned
    # by process: each process's core time is fitted by the kinds that work in it, and a kind's
    # cost is the sum of its sides
    lacking = [run.name for run in runs if run.broker_cores is None]
    if by_process and lacking:
        raise ConfigError(f"calibrate --rates-from --by-process: {', '.join(lacking)} did not record the broker "
                          "process's busy cores over each v4 run (broker_saturation_cpu ... broker_cores)")
    two_sided = [k for k in pinned if k in CLIENT_KINDS]
    if by_process and two_sided:
        raise ConfigError(f"calibrate --core {', '.join(two_sided)} --by-process: {', '.join(two_sided)} works in "
                          "both processes: pin a kind of the broker's alone "
                          f"({', '.join(k for k in KINDS if k not in CLIENT_KINDS)})")
    columns = [(k, "broker") for k in free] + ([(k, "client") for k in free if k in CLIENT_KINDS] if by_process else [])
    record["fitted_by_process"] = by_process
    rows, targets = [], []
    with tempfile.TemporaryDirectory(prefix="txnbench-rates-fit-") as tmp:
        def error(prof: LatencyProfile, res: dict[str, ResourceSpec], design: str) -> tuple[dict[str, float], float]:
            """The model's rates of ``design`` on every run's trace, and their squared log error
            against the broker's medians."""
            rates = {run.name: saturated_replay(prof, res, run.trace, run.repeat, design, scratch(tmp, run.name),
                                                run.v5_history, run.v5_listeners)[0] for run in runs}
            return rates, sum(math.log(rates[r.name] / statistics.median(r.rates[design])) ** 2 if rates[r.name]
                              else math.inf for r in runs)

        for run in runs:
            per_kind = saturated_replay(profile, unbound, run.trace, run.repeat, "v4", scratch(tmp, run.name))[1]
            per_txn = [per_kind.get(k, 0.0) for k in KINDS]
            # (side, its core-µs per committed txn): the broker's process and the rest, or the machine's
            sides = (list(zip(("broker", "client"), run.process_core_us_per_txn())) if by_process
                     else [("broker", run.core_us_per_txn)])
            for side, us in sides:
                left = us - sum(per_kind.get(k, 0.0) * v for k, v in pinned.items() if side == "broker")
                in_side = f" in the {side} process" if by_process else ""
                if left <= 0 and pinned and side == "broker":
                    raise ConfigError(f"calibrate --core {', '.join(f'{k}={v}' for k, v in pinned.items())}: the pinned "
                                      f"costs alone exceed {run.name}'s {us:,.0f} core-µs per committed txn{in_side}")
                if left <= 0:
                    raise ConfigError(f"calibrate --rates-from: {run.name}'s runs leave no core time per committed "
                                      f"txn{in_side} ({us:,.0f} µs) to fit")
                rows.append([per_kind.get(kind, 0.0) if on == side else 0.0 for kind, on in columns])
                targets.append(left)
            record["traces"][run.name] = {"core_us_per_txn": round(run.core_us_per_txn, 1),
                                          "calls_per_txn": {k: round(x, 2) for k, x in zip(KINDS, per_txn)},
                                          "broker_runs": run.rates, "busy_cores": run.busy_cores}
            if by_process:
                record["traces"][run.name].update(broker_cores=run.broker_cores, core_us_per_txn_by_process={
                    side: round(us, 1) for side, us in sides})
            progress(f"rates fit: {run.name}: " + (", ".join(f"{us:,.0f} core-µs per committed v4 txn in the {side}"
                                                             + (" process" if side == "broker" else "'s")
                                                             for side, us in sides) if by_process else
                                                   f"{run.core_us_per_txn:,.0f} core-µs per committed v4 txn")
                     + f" on the broker's runs, calls per txn {dict(zip(KINDS, (round(x, 1) for x in per_txn)))}")
        solved = nnls(rows, targets)
        sided: dict[str, dict[str, int]] = {}
        for (kind, side), c in zip(columns, solved):
            if round(c) > 0:
                sided.setdefault(side, {})[kind] = round(c)
        summed = {kind: sum(c for (of, _), c in zip(columns, solved) if of == kind) for kind in free}
        shape = {kind: c for kind, c in summed.items() if round(c) > 0}
        if not shape:
            raise ConfigError(f"calibrate --rates-from {where}: no non-negative core costs fit the runs there")
        record["core_us_least_squares"] = {k: round(c) for k, c in shape.items()}
        if by_process:
            record["core_us_least_squares_by_process"] = sided
        fixed = {k: v for k, v in pinned.items() if v > 0}  # a kind pinned at 0 works on no core
        progress(f"rates fit: core µs per call by least squares {record['core_us_least_squares']} on {cores} cores")

        # the model's cores are never all busy (a txn's calls wait on one another): the costs'
        # scale is fitted to the broker's rates by replaying, the bookie unbounded (a pinned kind
        # keeps its cost)
        record["scale_scan"] = []
        for scale in SCALES:
            costs = {**fixed, **{k: max(1, round(c * scale)) for k, c in shape.items()}}
            rates, err = error(profile, dict(unbound, cpu=ResourceSpec.cores(costs, cores)), "v4")
            record["scale_scan"].append({"scale": scale, "v4": rates, "error": round(err, 4)})
            progress(f"rates fit: core costs x{scale}: model v4 {rates} (squared log error {err:.4f})")
        best = min(record["scale_scan"], key=lambda x: x["error"])["scale"]
        costs = record["core_us"] = {**fixed, **{k: max(1, round(c * best)) for k, c in shape.items()}}
        cpu = ResourceSpec.cores(costs, cores)
        progress(f"rates fit: core µs per call {costs} on {cores} cores")

        record["bookie_scan"] = []
        for k in BOOKIE_CONCURRENCY:
            res = dict(unbound, cpu=cpu, **({"bookie": _bookie(profile, k)} if k is not None else {}))
            rates, err = error(profile, res, "v4")
            record["bookie_scan"].append({"bookie": k, "v4": rates, "error": round(err, 4)})
            progress(f"rates fit: bookie x{k or 'unbounded'}: model v4 {rates} (squared log error {err:.4f})")
        least = min(s["error"] for s in record["bookie_scan"])
        chosen = next(s for s in record["bookie_scan"] if s["error"] <= least * 1.01 + 1e-9)
        record["bookie"] = chosen["bookie"]
        resources = dict(unbound, cpu=cpu)
        if chosen["bookie"] is not None:
            resources["bookie"] = _bookie(profile, chosen["bookie"])

        # v5 is not fitted: its rates are the check (its store's threads and the listing's walk
        # are calibrate's, fitted to its own saturation trace across histories)
        v5_rates = error(profile, resources, "v5")[0]
        checks = {}
        for run in runs:
            v4, v5 = chosen["v4"][run.name], v5_rates[run.name]
            broker = {d: statistics.median(run.rates[d]) for d in ("v4", "v5") if run.rates.get(d)}
            checks[run.name] = {"model": {"v4": v4, "v5": v5, "ratio": round(v5 / v4, 4) if v4 else None},
                                "broker": {**broker, "ratio": round(broker["v5"] / broker["v4"], 4)
                                           if broker.get("v4") and "v5" in broker else None}}
        record["check"] = checks
    note = (f"{NOTE} {where} "
            f"(bench/calibrate/rates_fit.py): cpu, the host's {cores} cores, each call of {', '.join(costs)} working "
            + ", ".join(f"{v} µs" for v in costs.values())
            + " on one (inside its latency)"
            + (f" ({', '.join(f'{k} {v} µs' for k, v in pinned.items())} pinned by --core)" if pinned else "")
            + (", from the busy cores of the broker's process and of the rest of the machine over the broker's v4 runs, "
               "each fitted by the kinds that work in it ("
               + "; ".join(f"{n} {t['core_us_per_txn_by_process']['broker']:,.0f} and "
                           f"{t['core_us_per_txn_by_process']['client']:,.0f} core-µs per committed txn"
                           for n, t in record["traces"].items())
               + "; by least squares, the broker's " + _costs(sided.get("broker", {})) + ", the client's "
               + _costs(sided.get("client", {})) if by_process else
               ", from the machine's busy cores over the broker's v4 runs ("
               + "; ".join(f"{n} {t['core_us_per_txn']:,.0f} core-µs per committed txn" for n, t in record["traces"].items()))
            + f") and scaled to their rates; bookie {'unbounded' if chosen['bookie'] is None else 'x' + str(chosen['bookie'])}"
              f" with them, the concurrency whose model v4 rates are nearest the broker's medians; v5 not fitted: "
            + "; ".join(f"{n}: model v4 {c['model']['v4']:,.0f}, v5 {c['model']['v5']:,.1f}, broker "
                        f"{c['broker']['v4']:,.0f}, {c['broker']['v5']:,.1f} committed txn/s" for n, c in checks.items()))
    return profile.derived(resources=resources), record, note


def _costs(costs: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v} µs" for k, v in costs.items()) or "none"


def _bookie(profile: LatencyProfile, concurrency: int) -> ResourceSpec:
    """The profile's bookie at ``concurrency`` (each append holding a slot for its latency, one per run)."""
    was = profile.resources.get("bookie")
    if was is None:
        return ResourceSpec(None, concurrency, True)
    return dataclasses.replace(was, concurrency=concurrency)


def with_rates(path: str, folders: Sequence[str], out: str, command: str,
               progress: Callable[[str], None] = lambda s: None, name: str | None = None,
               pinned: Mapping[str, int] | None = None, by_process: bool = False) -> LatencyProfile:
    """The profile at ``path`` with ``cpu`` and ``bookie`` fitted to the validations in ``folders``
    (:func:`fit`, ``pinned`` kinds' costs given, ``by_process`` or over the machine), every
    operation and the other resources as they were, named ``name`` (by default as it was); the
    notes and ``provenance.extra["pulsar.rates_fit"]`` say when, from what and by what command."""
    return refitted(functools.partial(fit, pinned=pinned, by_process=by_process), "pulsar.rates_fit", path, folders,
                    out, command, progress, name)
