"""``txnbench campaign``: the lockstep state machine with fault injection
(``tests/stateful/test_lockstep.py``: every transactional engine x backend x dispatch mode driven
with the same operations, broker crashes, coordinator restarts, splits and merges, each history
judged by :mod:`bench.check`) run with random seeds for a time or history budget, in parallel
processes. The default test run keeps a small derandomised slice of the same machine.

Each worker runs batches of Hypothesis examples (generation only: a failing example is reported,
not shrunk, so the campaign keeps going) until the budget is spent, and counts histories
checked, faults injected and violations by kind; an assertion the machine raises (systems that
disagree, differing deliveries, a broken invariant) is counted by its kind too, with one sample
message per kind.

Combinations: the crash-safe transactional ones, as the test run (the shipped v5 loses on the
crashes the machine injects by design: its windows are findings elsewhere), the Redis-backed ones
too with ``--redis``. ``--steps`` trades depth for count: 14 (CI's) checks ~230 histories/s on two
workers of this 2-core machine, ~115 with ``--redis`` (104,172 in 904 s), 10 about twice as many.

The state machine and its engine combinations live with the tests (``tests/``), so the campaign
runs from a source checkout.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.errors import ConfigError

BATCH_EXAMPLES = 25  # examples per Hypothesis run in a worker (a failure ends only its batch; the budget is checked between batches)


@dataclass
class CampaignResult:
    histories: int = 0
    examples: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    violations: Counter[str] = field(default_factory=Counter)
    samples: dict[str, str] = field(default_factory=dict)  # one message per violation kind
    seconds: float = 0.0
    workers: int = 1

    def add(self, other: dict[str, Any]) -> None:
        self.histories += other["histories"]
        self.examples += other["examples"]
        self.faults.update(other["faults"])
        self.violations.update(other["violations"])
        for k, v in other["samples"].items():
            self.samples.setdefault(k, v)

    def lines(self) -> list[str]:
        rate = self.histories / self.seconds if self.seconds else 0.0
        out = [f"histories checked: {self.histories:,} ({self.examples:,} examples, {self.workers} workers, "
               f"{self.seconds:.0f} s, {rate:,.0f} histories/s)",
               f"faults injected: {sum(self.faults.values()):,}"
               + "".join(f"\n  {k}: {v:,}" for k, v in sorted(self.faults.items())),
               f"violations: {sum(self.violations.values()):,}"
               + "".join(f"\n  {k}: {v:,}" for k, v in sorted(self.violations.items()))]
        out += [f"sample {k}: {v}" for k, v in sorted(self.samples.items())]
        return out


def _checkout_on_path() -> None:
    """The console script does not put the checkout on ``sys.path`` (``python -m`` from its root
    does): add the root this ``bench`` package was loaded from when it holds ``tests/stateful``."""
    root = Path(__file__).resolve().parents[2]
    if (root / "tests" / "stateful").is_dir() and str(root) not in sys.path:
        sys.path.insert(0, str(root))


def _machine(redis_url: str | None) -> tuple[Any, dict[str, int]]:
    _checkout_on_path()
    try:
        from tests.combos import COMBOS
        from tests.stateful import test_lockstep as lockstep
    except ImportError as exc:
        raise ConfigError(f"campaign runs from a txnbench source checkout (tests/stateful): {exc}") from None
    allow = {"redis"} if redis_url else set()
    # as the test run does (test_lockstep._transactional): the machine crashes brokers and
    # coordinators, which the shipped v5 is not safe against by design (PULSAR5_CODE.md D8, D13,
    # D14; its windows are findings of tests/unit/test_v5_shipped.py, not violations to count)
    combos = [c for c in COMBOS if c.transactional and c.crash_safe and set(c.needs) <= allow]
    return type("CampaignMachine", (lockstep.Lockstep,), {"combos": combos}), lockstep.STATS


def _kind_of(exc: BaseException) -> str:
    """The kind of an assertion of the machine's own (the checker's violations are counted by
    the machine, by the checker's kinds)."""
    text = str(exc)
    if "systems disagree" in text:
        return "systems-disagree"
    if "deliveries differ" in text:
        return "deliveries-differ"
    return type(exc).__name__


def _worker(args: tuple[int, float, int, str | None, int]) -> dict[str, Any]:
    """One process: batches of random examples until ``deadline`` (wall clock, time.time) or
    ``histories`` checked."""
    index, deadline, histories, redis_url, steps = args
    if redis_url:
        os.environ["TXNBENCH_REDIS_URL"] = redis_url  # tests.combos reads the server's URL from there
    from hypothesis import HealthCheck, Phase, settings

    from engine.dispatcher import DispatchMode

    machine, stats = _machine(redis_url)
    machine.TestCase.settings = settings(max_examples=BATCH_EXAMPLES, stateful_step_count=steps, deadline=None,
                                         suppress_health_check=list(HealthCheck), derandomize=False, database=None,
                                         phases=[Phase.generate], print_blob=False)
    per_example = sum(len(c.modes or tuple(DispatchMode)) for c in machine.combos)  # histories per machine
    own: Counter[str] = Counter()
    samples: dict[str, str] = {}
    while time.time() < deadline and stats.get("histories", 0) < histories:
        before = {k: v for k, v in stats.items() if k.startswith("violations.")}
        try:
            machine.TestCase().runTest()
        except Exception as exc:  # noqa: BLE001 - every failure is a finding to count, not to stop on
            new = sorted(k for k, v in stats.items() if k.startswith("violations.") and v > before.get(k, 0))
            if new:  # the checker's: the sample goes with a kind this batch found
                kind = new[0][len("violations."):]
            else:
                kind = _kind_of(exc)
                own[kind] += 1
            samples.setdefault(kind, " ".join(str(exc).split())[:300])
    checker = Counter({k[len("violations."):]: v for k, v in stats.items() if k.startswith("violations.")})
    return {
        "histories": stats.get("histories", 0), "examples": stats.get("histories", 0) // max(1, per_example),
        "faults": {k[len("faults."):]: v for k, v in stats.items() if k.startswith("faults.")},
        "violations": dict(own + checker), "samples": samples,
    }


def _quiet_worker() -> None:
    """Ctrl-C at a terminal reaches the whole process group: the parent stops the pool (its
    workers then end by SIGTERM), so the workers ignore SIGINT instead of each printing a
    KeyboardInterrupt stack trace."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_campaign(budget_s: float, histories: int, workers: int, *, redis_url: str | None = None, steps: int = 14,
                 progress: Callable[[str], None] | None = None) -> CampaignResult:
    """Run ``workers`` processes until ``budget_s`` seconds pass or about ``histories``
    histories are checked (whichever first); sum what they found."""
    if redis_url:
        from metadata_v5.engine import open_store

        open_store(redis_url).close()  # unreachable: one BackendUnavailable before any worker starts
    _machine(redis_url)  # not a checkout: one ConfigError here
    started = time.time()
    deadline = started + budget_s
    per_worker = -(-histories // workers)
    result = CampaignResult(workers=workers)
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited Hypothesis or engine state
    with ctx.Pool(workers, initializer=_quiet_worker) as pool:  # Ctrl-C: the pool is terminated on the way out
        for done in pool.imap_unordered(_worker, [(i, deadline, per_worker, redis_url, steps) for i in range(workers)]):
            result.add(done)
            if progress is not None:
                progress(f"worker finished: {done['histories']:,} histories, "
                         f"{sum(done['violations'].values())} violations")
    result.seconds = time.time() - started
    return result
