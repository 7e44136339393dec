"""The ``txnbench`` command line: one small function per verb over the library API.

User mistakes (bad options, malformed traces, unreachable services) end with one line on stderr
and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.replay import registry
from engine.dispatcher import DispatchMode
from engine.errors import TxnbenchError
from metadata_v5.options import GcMode

EXIT_USAGE = 2

# Resource bounds on user-given sizes (issue 20): large enough for every documented use (a 20M-row
# trace, recovery at 10^7 entries, end-txn over 256 partitions), small enough to fail fast
# instead of exhausting memory or running for hours.
MAX_EVENTS = 200_000_000
MAX_DEMO_MESSAGES = 100_000
MAX_DRAIN_MS = 24 * 3600 * 1000  # a day of virtual time after the last event
MAX_PARTICIPANTS = 4_096
MAX_LOG_ENTRIES = 10_000_000
MAX_SCENARIO_S = 24 * 3600


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread so every ``finally`` and staging directory
    cleans up as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in {lo}..{hi:_}, got {text}")
        return value

    return parse


def _float_in(lo: float, hi: float, *, open_lo: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value > hi or value < lo or (open_lo and value == lo):
            raise argparse.ArgumentTypeError(f"must be a finite number in {'(' if open_lo else '['}{lo:g}, {hi:g}], got {text}")
        return value

    return parse


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the usage is one ``--help`` away)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def version_text() -> str:
    from importlib import metadata

    from bench.replay.results import git_identity

    try:
        v = metadata.version("txnbench")
    except metadata.PackageNotFoundError:
        v = "unknown"
    git = git_identity()
    return f"txnbench {v}" + (f" (git {git['sha'][:12]}{', dirty' if git['dirty'] else ''})" if git else "")


def _progress(enabled: bool):  # type: ignore[no-untyped-def]
    """A (label, done, total) callback drawing tqdm bars on a terminal, silent otherwise."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bars: dict[str, tqdm] = {}

    def update(label: str, done: int, total: int) -> None:
        bar = bars.get(label)
        if bar is None:
            bar = bars[label] = tqdm(total=total, desc=f"replay {label}", unit="ev", unit_scale=True, leave=False)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return update


# -- argument builders shared by verbs ----------------------------------------------------------


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metadata", default="memory://", help="v5 metadata store URL: memory:// or redis://HOST:PORT")
    p.add_argument("--ledger", default="memory://", help="ledger URL: memory:// or kafka://HOST:PORT")
    p.add_argument("--dispatch", default="polling", choices=[m.value for m in DispatchMode],
                   help="polling: as every Pulsar release; notify: a what-if in no release (the buffer wakes dispatchers)")
    p.add_argument("--polling", default="pulsar", choices=["pulsar", "shared-backoff", "spin"],
                   help="re-read delay when blocked at maxReadPosition (polling mode); pulsar follows each "
                        "subscription's type (trace column sub_type): 10 ms Exclusive/Failover, 11-20 ms Shared/Key_Shared")
    for spec in registry.ENGINES.values():  # each design's own flags (a v5 variant, its GC mode)
        for flag in spec.cli_flags:
            p.add_argument(flag.flag, default=flag.default, choices=list(flag.choices), help=flag.help)
    p.add_argument("--time", default=None, choices=["virtual", "wall"],
                   help="time mode (default: virtual on embedded backends, wall with Redis or Kafka)")
    p.add_argument("--drain-ms", type=_int_in(0, MAX_DRAIN_MS), default=None,
                   help="time to run after the last event (default: 70000 in virtual time, 5000 in wall time; "
                        "--target: at most this long waiting for deliveries, 30000, ending after 2-5 s without one)")
    p.add_argument("--drain-max-ms", type=_int_in(0, MAX_DRAIN_MS), default=None,
                   help="then keep draining while messages are undelivered or committed txns not visible, up to this "
                        "long after the last event; a run still not quiescent says so and exits 1 (default: 60000 in "
                        "wall time; in virtual time no extension)")
    for spec in registry.ENGINES.values():
        if spec.option_help:
            p.add_argument(f"--{spec.name}-option", action="append", default=[], metavar="KEY=VALUE",
                           help=spec.option_help)
    p.add_argument("--no-progress", action="store_true")


def _add_latency_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--latency-profile", default=None, metavar="FILE",
                   help="virtual-time latencies: a profile file, or the name of one in datasets/latency/ "
                        "(constants, pulsar-standalone-5.0.0-M1, redis-local, kafka-local); default: pulsar-standalone-5.0.0-M1")
    p.add_argument("--latency", action="append", default=[], metavar="KIND=VALUE",
                   help="override one operation kind of the profile with a constant in µs, e.g. meta.cas=1500; repeatable")
    p.add_argument("--latency-seed", type=int, default=1, metavar="N",
                   help="seed of the latency draws (profiles with distributions; default 1)")


def _latency(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The run's latency model and the profile it came from (--latency-profile, --latency, --latency-seed)."""
    from bench.replay.config import DEFAULT_LATENCY_PROFILE
    from engine.errors import ConfigError
    from engine.profile import LatencyProfile, resolve

    # verbs without the options (stream run: wall time, where latencies are real) get the default
    profile = LatencyProfile.load(resolve(getattr(args, "latency_profile", None) or DEFAULT_LATENCY_PROFILE))
    overrides: dict[str, int] = {}
    for pair in getattr(args, "latency", []):
        kind, eq, text = pair.partition("=")
        if not eq or kind not in profile.operations:
            raise ConfigError(f"--latency {pair!r}: expected KIND=VALUE with KIND one of {', '.join(profile.operations)}")
        try:
            overrides[kind.replace(".", "_", 1)] = value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise ConfigError(f"--latency {pair!r}: VALUE must be an integer >= 0 (µs)")
    return profile.to_latency_model(getattr(args, "latency_seed", 1)).with_overrides(**overrides), profile


def _add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="replace what an earlier txnbench run wrote in --out (other files are never touched)")


def _add_wall_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-mixed", action="store_true",
                   help="run v4 and v5 in wall time even when one keeps its transaction state on an in-memory "
                        "backend and the other on a real service (refused otherwise: the comparison is unfair)")
    p.add_argument("--prometheus-port", type=int, default=None, metavar="PORT",
                   help="serve the running replays' metrics (OpenMetrics) on http://127.0.0.1:PORT/metrics "
                        "(0: any free port); metrics.txt is written in every result directory anyway")


def _print_pacing(manifest: dict[str, object]) -> None:
    from bench.replay.walltime import pacing_line

    for label, run in manifest["runs"].items():  # type: ignore[attr-defined]
        if run.get("rates") and run.get("time_mode") == "wall":
            print(pacing_line(label, run["rates"]))
    if manifest.get("mixed_backends"):
        print(f"warning (--allow-mixed): {str(manifest['mixed_backends']).split(' — ')[0]}")


def _configs(args: argparse.Namespace, engines: list[str]):  # type: ignore[no-untyped-def]
    from bench.replay.config import RunConfig
    from engine.errors import ConfigError

    real = not args.metadata.startswith("memory://") or not args.ledger.startswith("memory://")
    time_mode = args.time or ("wall" if real else "virtual")
    drain_ms = args.drain_ms if args.drain_ms is not None else (5_000 if time_mode == "wall" else 70_000)
    drain_max_ms = args.drain_max_ms
    if drain_max_ms is None and time_mode == "wall":  # real backends: wait for in-flight work to land
        drain_max_ms = max(drain_ms, 60_000)
    if drain_max_ms is not None and drain_max_ms < drain_ms:
        raise ConfigError(f"--drain-max-ms {drain_max_ms} is below --drain-ms {drain_ms}")
    options = {name: _run_options(args, name) for name in registry.ENGINES}  # every engine's flags are checked
    latency, profile = _latency(args)
    return [
        RunConfig(engine=e, ledger_url=args.ledger, metadata_url=args.metadata, dispatch=DispatchMode(args.dispatch),
                  polling=args.polling, time_mode=time_mode, latency=latency, latency_profile=profile,
                  drain_ms=drain_ms, drain_max_ms=drain_max_ms, options=options[e],
                  pacing=getattr(args, "pacing", "trace"))
        for e in engines
    ]


def _run_options(args: argparse.Namespace, engine: str) -> dict[str, object]:
    """An engine's options from its own flags (``--v5-variant``) and its ``--<engine>-option``s."""
    spec = registry.spec(engine)
    options = _engine_options(engine, getattr(args, f"{engine}_option")) if spec.option_help else {}
    for flag in spec.cli_flags:
        options[flag.option] = getattr(args, flag.flag.lstrip("-").replace("-", "_"))
    return options


def _engine_options(engine: str, pairs: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` settings of one engine, typed like the option's default and checked by the
    engine's own options class (a bad one is a ConfigError naming it)."""
    from engine.errors import ConfigError

    spec = registry.spec(engine)
    cls = spec.options_class
    own_flags = {flag.option: flag.flag for flag in spec.cli_flags}
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    out: dict[str, object] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq or not key:
            raise ConfigError(f"--{engine}-option {pair!r}: expected KEY=VALUE")
        if key in own_flags:
            raise ConfigError(f"--{engine}-option {key}: use {own_flags[key]}")
        default = defaults.get(key)
        value: object = text
        if isinstance(default, bool):
            if text not in ("true", "false"):
                raise ConfigError(f"--{engine}-option {key}={text!r}: expected true or false")
            value = text == "true"
        elif isinstance(default, int) or (default is None and text.lstrip("-").isdigit()):
            try:
                value = int(text)
            except ValueError:
                raise ConfigError(f"--{engine}-option {key}={text!r}: expected an integer") from None
        out[key] = value
    cls.from_kwargs(**out)  # unknown keys and bad values are refused here, before anything runs
    return out


def _add_target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=None, metavar="pulsar://HOST:PORT",
                   help="run the trace through a real Pulsar 5 broker (v4 design on persistent://, v5 on topic://) "
                        "instead of the models")
    p.add_argument("--admin-url", default=None, metavar="URL",
                   help="the broker's admin URL (default: $TXNBENCH_PULSAR_ADMIN_URL, else http://HOST:8080)")
    p.add_argument("--pacing", default="trace", choices=["trace", "asap"],
                   help="issue rows at the trace's timestamps, or as fast as possible (the broker: at once, up to "
                        "the client's in-flight bound; the models: one microsecond apart in virtual time, under the same bound of "
                        "1,000 unanswered new_txn/publish/commit/abort requests)")
    p.add_argument("--pulsar-dir", default=None, metavar="DIR",
                   help="--target: the broker's scripts/pulsar.sh DIR (default $TXNBENCH_PULSAR_DIR), to restart it "
                        "for crash_broker rows")
    _add_client_warm_up(p)


def _add_client_warm_up(p: argparse.ArgumentParser, scope: str = "--target: the trace client", on: bool = False) -> None:
    """``on``: the default, with ``--no-client-warm-up`` to leave it out (the commands whose figures
    are judged: a cold client halved the broker's saturated v4 rate, datasets/validation/README.md)."""
    p.add_argument("--client-warm-up", action=argparse.BooleanOptionalAction if on else "store_true", default=on,
                   help=f"{scope} (a JVM started for each run) first runs the trace's rows as fast "
                        "as possible in a namespace of their own, unmeasured, so that its JIT has compiled them before "
                        "the measured rows (the broker's counters are read after it; not for traces with crash rows)"
                        + ("; on by default" if on else ""))


def _add_saturation_repeat(p: argparse.ArgumentParser) -> None:
    p.add_argument("--saturation-repeat", type=_int_in(1, 100), default=None, metavar="N",
                   help="the as-fast-as-possible runs (the broker's, its later warm-up runs and the model's) replay the "
                        "trace's rows N times over, each pass with its own txn and message ids (default: per design, as "
                        "many times as make its txn phase last about 1 s at the rate its last warm-up run measured: one "
                        "pass of a 2,000-row trace saturated the broker's v4 for 90-520 ms and its rate moved 4.5x run to "
                        "run, while v5's one pass lasts about 1 s); a trace with split, merge or crash "
                        "rows runs once")


def _add_warm_up(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warm-up", type=_int_in(0, 20), default=4, metavar="N",
                   help="--target: discarded as-fast-as-possible broker runs before the measured ones, at least "
                        "(default 4: a broker's first runs are its JIT's; END_TXN's path, run once per txn, is still "
                        "cold after one: v4 end-txn p50 at the trace's pace 6.9 ms after 1, 5.9 ms after 4, 4.7 ms on "
                        "a broker serving for hours, small-slow-2000)")
    _add_warm_up_txns(p, "--target: and")


def _add_kept_fit(p: argparse.ArgumentParser, flag: str, what: str, module: str, stays: str) -> None:
    """A calibrate fit to kept validations (bench/calibrate/kept_fit.py): a repeatable DIR whose
    validations the fit reads, several fitted together."""
    p.add_argument(flag, action="append", default=None, metavar="DIR",
                   help=f"with --refit: instead, {what} the validations in DIR recorded (bench/calibrate/{module}.py); "
                        f"repeatable: several DIRs (sets from different brokers) are fitted together; {stays}")


def _add_warm_up_txns(p: argparse.ArgumentParser, scope: str) -> None:
    p.add_argument("--warm-up-txns", action="append", type=_design_count, default=[], metavar="DESIGN=N",
                   help=f"{scope} a design's discarded runs go on until their rows have held N txns, "
                        "at most 16 runs (default v4=6000 v5=300: a fresh broker's v4 rate rose 2.5x over its "
                        "first 5,000 txns, then held; 0 for none); repeatable")
    p.add_argument("--warm-up-jit", type=_share, default=None, metavar="SHARE",
                   help=f"{scope} a design's discarded runs also go on, at most 16 in all, while the last one's broker "
                        "spent more than SHARE (0-1) of its cores in its JIT compiler threads (default 0.05; "
                        "1: not judged): a fresh broker's v4 rate followed its JIT, 396-1,808 committed txn/s over "
                        "twelve runs, and warmed until 0.05 its asap runs on small and omb spread 1.02-1.43x, where "
                        "they had spread up to 2x")


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, got {text!r}")
    return value


def _design_count(text: str) -> tuple[str, int]:
    design, eq, n = text.partition("=")
    if not eq or design not in ("v4", "v5"):
        raise argparse.ArgumentTypeError(f"expected DESIGN=N with DESIGN v4 or v5, got {text!r}")
    return design, _int_in(0, 10_000_000)(n)


def _warm_up_jit(args: argparse.Namespace) -> float | None:
    """--warm-up-jit over the default (bench.pulsar.validate_run.WARM_UP_JIT); None for 1: not judged."""
    from bench.pulsar.validate_run import WARM_UP_JIT

    share = WARM_UP_JIT if args.warm_up_jit is None else args.warm_up_jit
    return None if share >= 1.0 else share


def _warm_up_txns(args: argparse.Namespace) -> dict[str, int]:
    """--warm-up-txns over the defaults (bench.pulsar.validate_run.WARM_UP_TXNS)."""
    from bench.pulsar.validate_run import WARM_UP_TXNS

    return {**WARM_UP_TXNS, **dict(args.warm_up_txns)}


def _target(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from bench.pulsar.target import parse_target

    target = parse_target(args.target, args.admin_url, args.pacing, args.pulsar_dir, args.drain_ms)
    return dataclasses.replace(target, client_warm_up=bool(getattr(args, "client_warm_up", False)))


def _designs(engine: str) -> list[str]:
    from engine.errors import ConfigError

    if engine not in registry.designs() and engine != "both":
        raise ConfigError(f"--engine {engine}: the Pulsar target runs the {' and '.join(registry.designs())} designs")
    return _engines(engine)


def _engines(engine: str) -> list[str]:
    """``--engine``'s runs: ``both`` is every registered design."""
    return registry.designs() if engine == "both" else [engine]


def _engine_choices(*, disabled: bool) -> list[str]:
    """``--engine`` choices: the designs, ``both``, then (where it makes sense) transactions disabled."""
    others = [name for name in registry.ENGINES if name not in registry.designs()]
    return [*registry.designs(), "both", *(others if disabled else [])]


def _print_broker_runs(manifest: dict[str, object]) -> None:
    for label, run in manifest["runs"].items():  # type: ignore[attr-defined]
        rates = run["rates"]
        print(f"pulsar {label}: {run['events']} rows in {run['wall_seconds']} s; offered "
              f"{rates['offered_rows_per_s'] or 'asap'} rows/s, achieved {rates['achieved_rows_per_s']} rows/s "
              f"(acks aside), largest lag {rates['max_issue_lag_us'] / 1000:.0f} ms (acks aside), "
              f"{run['max_lag_us'] / 1000:.0f} ms (all rows); {rates['committed_txns_per_s']} committed txn/s")


# -- verbs --------------------------------------------------------------------------------------


def cmd_generate(args: argparse.Namespace) -> int:
    from bench.replay.output import check_out
    from bench.trace.workloads import generate, load_profile
    from engine.errors import ConfigError

    if (args.profile is None) == (args.omb_workload is None):
        raise ConfigError("give one of --profile or --omb-workload")
    if args.omb_workload is None and args.events is None:
        raise ConfigError("--events is required with --profile")
    profile = load_profile(args.profile) if args.profile is not None else None
    check_out(args.out, force=args.force, kind="file")
    if profile is None:
        from bench.trace.omb import generate_omb

        for line in generate_omb(args.omb_workload, args.events, args.seed, args.out):
            print(line)
        return 0
    rows = generate(profile, args.events, args.seed, args.out)  # written to a temp file, renamed at the end
    print(f"wrote {rows} events to {args.out}")
    return 0


def cmd_validate_trace(args: argparse.Namespace) -> int:
    from bench.trace.tracestats import summarize

    for line in summarize(args.path, args.format).lines():
        print(line)
    return 0


def cmd_wire(args: argparse.Namespace) -> int:
    import json

    from bench.pulsar.wire import run_start_us, summarize

    since = run_start_us(args.events) if args.events else 0
    summary = summarize(args.pcap, args.port, since_us=since)
    for line in summary.lines():
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from bench.replay.output import check_out

    if args.repeat != 1 and (args.target or args.spark or args.repeat < 1):
        from engine.errors import ConfigError

        raise ConfigError(f"--repeat {args.repeat}: must be >= 1, and repeats run in-process only (not with --target or --spark)")
    if args.prometheus_port is not None and (args.spark or args.target):
        from engine.errors import ConfigError

        raise ConfigError("--prometheus-port serves the models' replays in this process: not with --spark or --target")
    if args.target:
        from bench.pulsar.run import pulsar_replay

        if args.spark:
            from engine.errors import ConfigError

            raise ConfigError("--spark and --target do not go together")
        check_out(args.out, force=args.force)
        manifest = pulsar_replay(args.trace, _designs(args.engine), _target(args), args.out, force=args.force)
        _print_broker_runs(manifest)
        print(f"results in {args.out}")
        return 0
    configs = _configs(args, _engines(args.engine))
    from bench.scale.storage import is_uri
    from engine.errors import ConfigError

    if is_uri(args.out):  # only the Spark replay publishes to a store (bench.scale.storage)
        if not args.spark:
            raise ConfigError(f"--out {args.out}: a URI needs --spark; give a local directory")
    else:
        check_out(args.out, force=args.force)
    if args.spark:
        from bench.scale.spark import spark_replay

        manifest = spark_replay(args.trace, configs, args.out, master=args.spark,
                                progress=_progress(not args.no_progress), force=args.force,
                                driver_host=args.spark_driver_host)
    else:
        from bench.replay.runner import replay_trace

        from bench.replay.repeat import replay_repeated

        def once(d: str | Path) -> dict[str, Any]:
            return replay_trace(args.trace, configs, d, progress=_progress(not args.no_progress), force=args.force,
                                prometheus_port=args.prometheus_port, allow_mixed=args.allow_mixed,
                                announce=lambda line: print(line, file=sys.stderr, flush=True))

        manifest = (replay_repeated(args.trace, configs, args.out, args.repeat, once, force=args.force)
                    if args.repeat > 1 else once(args.out))
    for label, run in manifest["runs"].items():
        rss = f", peak RSS {run['peak_rss_mb']:.0f} MB" if run.get("peak_rss_mb") else ""
        print(f"{label}: {run['events']} events in {run['wall_seconds']} s ({run['events_per_second']} events/s{rss})")
    _print_pacing(manifest)
    if "spark" in manifest:
        s = manifest["spark"]
        print(f"spark {s['master']}: {s['shards']} shards in {s['wall_seconds']} s; peak RSS per shard task "
              f"{s['task_peak_rss_mb']:.0f} MB, driver {s['driver_peak_rss_mb']:.0f} MB")
    print(f"results in {args.out}")
    return _quiescent(args, manifest)


def _quiescent(args: argparse.Namespace, manifest: dict[str, object]) -> int:
    """0, or 1 after saying which runs ended with work in flight (their results are incomplete)."""
    from bench.replay.runner import not_quiescent

    lines = not_quiescent(manifest)
    for line in lines:
        print(f"txnbench {args.verb}: warning: {line}", file=sys.stderr)
    return 1 if lines else 0


def cmd_report(args: argparse.Namespace) -> int:
    from bench.report.abtest import parse_fail_on, regressions
    from bench.report.report import build

    rules = [parse_fail_on(spec) for spec in args.fail_on]  # a bad rule stops before anything is written
    rep = build(args.results, args.out, force=args.force)
    if args.format == "github":
        print(rep.github.read_text())
    else:
        print(f"report: {rep.html}")
        print(f"        {rep.markdown} (PR comment: {rep.github.name})")
    found = regressions(rep.comparisons, rules)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from bench.replay.output import staged_dir
    from bench.report.report import build
    from bench.replay.runner import check_trace, replay_trace
    from bench.trace.tracestats import summarize
    from bench.trace.workloads import generate, load_profile

    out = Path(args.out)
    started = time.perf_counter()
    target = _target(args) if args.target else None
    if target is not None:  # an unreachable broker stops the run before anything is generated
        from bench.pulsar.target import probe

        probe(target)
    profile = load_profile(args.profile)
    configs = _configs(args, registry.designs())
    # Everything goes to a private staging directory that becomes --out only when complete, so
    # an earlier compare's files (e.g. its scenarios and plots) never mix with this one's.
    with staged_dir(out, force=args.force) as tmp:
        shown = {str(tmp): str(out)}
        trace = tmp / "trace.parquet"
        rows = generate(profile, args.events, args.seed, trace)
        print(f"generated {rows} events ({args.profile}, seed {args.seed}) -> {out / 'trace.parquet'}")
        results: list[str | Path] = [tmp / "results"]
        history: dict[str, int] = {}  # v5's store's, with --target: the broker run's
        listeners: dict[str, int] = {}  # likewise, the watches of the v5 topics the broker loaded before
        if target is not None:  # the same trace through the real broker, reported beside the models
            from bench.pulsar.run import pulsar_replay
            from bench.pulsar.validate_run import asap_runs, broker_history, broker_listeners, groups, warm_up_broker

            # a broker's first runs are its JIT's; the warm-up also sets each design's asap trace
            state, traces = warm_up_broker(trace, target, tmp, args.warm_up, False, print, shown,
                                           args.saturation_repeat if target.pacing == "trace" else 1,
                                           _warm_up_txns(args), _warm_up_jit(args))
            broker = pulsar_replay(trace, registry.designs(), target, tmp / "broker", extra_manifest=state)
            _print_broker_runs(broker)
            results.append(tmp / "broker")
            history = {"broker": broker_history([tmp / "broker"])}
            listeners = {"broker": broker_listeners([tmp / "broker"], sorted(tmp.glob("broker*")))}
            if target.pacing == "trace":  # and as fast as possible: the "model vs broker" saturation figure
                asap = asap_runs(traces, target, tmp, 3, print, extra_manifest=state, shown=shown)
                results += asap
                history["asap"] = broker_history(asap)
                listeners["asap"] = broker_listeners(asap, sorted(tmp.glob("broker*")))
                for path, designs, suffix in groups(traces):  # the models as fast as possible, beside them
                    ops = summarize(path).ops_per_txn
                    replay_trace(path, [dataclasses.replace(c.with_history(history["asap"], ops, listeners["asap"]),
                                                            pacing="asap", namespace="")
                                        for c in configs if c.engine in designs], tmp / f"model-asap{suffix}", shown=shown)
                    results.append(tmp / f"model-asap{suffix}")
        # with --target, the models replay after the broker: v5's store starts from the history the
        # broker's had (validate_run.broker_history, as validate does)
        ops = summarize(trace).ops_per_txn if history.get("broker") else 1
        manifest = replay_trace(trace, [c.with_history(history.get("broker", 0), ops, listeners.get("broker", 0))
                                        for c in configs], tmp / "results",
                                progress=_progress(not args.no_progress),
                                shown=shown, prometheus_port=args.prometheus_port, allow_mixed=args.allow_mixed,
                                announce=lambda line: print(line, file=sys.stderr, flush=True))
        for label, run in manifest["runs"].items():
            print(f"replayed {label}: {run['events']} events in {run['wall_seconds']} s")
        _print_pacing(manifest)
        checked = check_trace(trace, configs)  # the report shows it beside the numbers
        checked.write(tmp / "check.json")
        print(f"checked {checked.histories} histories: {checked.to_json()['total_violations']} violations")
        if not args.no_scenarios:  # the review questions, with their plots, in the same report
            from bench.scenarios.scenarios import run_scenarios, save

            done = run_scenarios(latency=(configs[0].latency, configs[0].latency_profile))
            save(done, tmp / "scenarios.json")
            print(f"ran {len(done)} review-question scenarios in {sum(sc.wall_seconds for sc in done):.1f} s")
        rep = build(results, tmp / "report", title=f"txnbench compare: {args.profile}", shown=shown)
    report = out / "report" / "report.html"
    print(f"done in {time.perf_counter() - started:.1f} s")
    print("\n".join(rep.headline_text))  # the answer first, then where the details are
    print(f"report: {report}")
    print(f"        {report.with_suffix('.md')}")
    return _quiescent(args, manifest)


def _command_line(name: str) -> str:
    """The command as typed, for a profile's provenance; ``txnbench NAME`` when not run from the CLI."""
    return "txnbench " + " ".join(sys.argv[1:]) if sys.argv[1:2] == [name] else f"txnbench {name}"


def cmd_validate(args: argparse.Namespace) -> int:
    from bench.pulsar.validate_run import model_profile, rejudge, run_validate

    from engine.errors import ConfigError

    if args.latency_seeds and not args.rejudge_kept:
        raise ConfigError("validate --latency-seeds judges the kept sets once per seed: it goes with --rejudge-kept")
    if args.latency_seeds and args.latency_seed is not None:
        raise ConfigError("validate --latency-seed and --latency-seeds: give one")
    if args.rejudge_kept:
        from bench.pulsar.rejudge_kept import parse_seeds, rejudge_kept, rejudge_seeds, say_seeds, say_summary

        if args.rejudge or args.trace or args.target or args.calibrate or args.fresh_broker:
            raise ConfigError("validate --rejudge-kept judges the packed sets it finds: not with --rejudge, --trace, "
                              "--target, --calibrate or --fresh-broker")
        if args.latency_seeds:
            say_seeds(rejudge_seeds(args.rejudge_kept, args.out, parse_seeds(args.latency_seeds), args.latency_profile,
                                    force=args.force, progress=print), args.out)
            return 0
        say_summary(rejudge_kept(args.rejudge_kept, args.out, args.latency_profile, force=args.force, progress=print,
                                 latency_seed=args.latency_seed),
                    args.out)
        return 0
    if args.rejudge:
        if args.target or args.calibrate or args.fresh_broker:
            raise ConfigError("validate --rejudge runs no broker: not with --target, --calibrate or --fresh-broker")
        doc = rejudge(args.rejudge, args.out, args.latency_profile, force=args.force, trace=args.trace, progress=print,
                      latency_seed=args.latency_seed)
        _say_validation(doc, args.out)
        return 0
    if not args.trace or not args.target:
        raise ConfigError("validate needs --trace and --target pulsar://HOST:PORT (or --rejudge DIR, or "
                          "--rejudge-kept DIR)")
    target, warm_up_txns = _target(args), _warm_up_txns(args)
    calibration = None
    if args.calibrate:  # the model's profile measured on this broker first (bench.calibrate.in_session)
        from bench.calibrate.in_session import InSession

        calibration = InSession(target, args.calibrate_samples, _command_line("validate"), model_profile(None).name,
                                warm_up_txns, _warm_up_jit(args))
    doc = run_validate(args.trace, target, args.out, args.latency_profile, force=args.force, progress=print,
                       saturation=not args.no_saturation, saturation_runs=args.saturation_runs,
                       fresh_broker=args.fresh_broker, warm_up=args.warm_up, saturation_repeat=args.saturation_repeat,
                       warm_up_txns=warm_up_txns, warm_up_jit=_warm_up_jit(args), calibration=calibration,
                       latency_seed=args.latency_seed)
    _say_validation(doc, args.out)
    return 0


def _say_validation(doc: dict[str, Any], out: str) -> None:
    missed = [c for c in doc["checks"] if c["verdict"] in ("missed", "differs")]
    print(f"model vs broker, against the goals: {doc['tally']}"
          + (f"; missed: {', '.join(c['design'] + ' ' + c['metric'] for c in missed)}" if missed else ""))
    print(f"report: {Path(out) / 'report' / 'report.html'}")


def cmd_demo(args: argparse.Namespace) -> int:
    from bench.scenarios.demo import run_demo

    run_demo(sys.stdout, messages=args.messages, mode=DispatchMode(args.dispatch))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Replay a trace (given, or generated) with a history per engine and check every history
    (bench.check); print and write ``check.json``. Exit 1 if any violation is found."""
    from bench.replay.output import staged_dir
    from bench.replay.runner import check_trace
    from bench.trace.workloads import generate, load_profile

    out = Path(args.out)
    if args.target:  # an unreachable broker stops the run before anything is written
        from bench.pulsar.target import probe

        probe(_target(args))
    profile = load_profile(args.profile) if args.trace is None else None
    configs = [] if args.target else _configs(args, _engines(args.engine))
    with staged_dir(out, force=args.force, protect=[Path(args.trace)] if args.trace else []) as tmp:
        if profile is not None:
            trace = tmp / "trace.parquet"
            generate(profile, args.events, args.seed, trace)
        else:
            trace = Path(args.trace)
        if args.target:
            from bench.pulsar.run import pulsar_check

            summary = pulsar_check(trace, _designs(args.engine), _target(args), print)
        else:
            summary = check_trace(trace, configs, print)
        for line in summary.lines():
            print(line)
        summary.write(tmp / "check.json")
    print(f"summary in {out / 'check.json'}")
    return 1 if summary.to_json()["total_violations"] else 0


def cmd_profiles(args: argparse.Namespace) -> int:
    from bench.trace.workloads import list_profiles, load_profile

    for name in list_profiles():
        print(f"{name:<40} {load_profile(name).description}")
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    from bench.replay.output import staged_dir
    from bench.scenarios.scenarios import run_scenarios

    params: dict[str, dict[str, object]] = {"sealed": {"window_s": args.window_s}, "polling": {"hold_s": args.hold_s}}
    if args.participants:
        params["endtxn"] = {"sizes": tuple(args.participants)}
    if args.sizes:
        params["recovery"] = {"sizes": tuple(args.sizes)}
    if args.open_txns:
        params.setdefault("recovery-open", {})["open_txns"] = tuple(args.open_txns)
    if args.open_log:
        params.setdefault("recovery-open", {})["n"] = args.open_log
    started = time.perf_counter()
    latency = _latency(args)
    with staged_dir(args.out, force=args.force) as tmp:
        run_scenarios(args.names or None, tmp, large=args.large, params=params, progress=print, latency=latency)
    print(f"done in {time.perf_counter() - started:.1f} s")
    print(f"report: {Path(args.out) / 'report.html'}")
    print(f"        {Path(args.out) / 'report.md'} (data: scenarios.json)")
    return 0


def _pinned_cores(items: list[str]) -> dict[str, int]:
    """``--core KIND=US`` values: {kind: µs}; a malformed one is a ConfigError naming it."""
    from engine.errors import ConfigError

    pinned: dict[str, int] = {}
    for item in items:
        kind, sep, us = (part.strip() for part in item.partition("="))
        if not sep or not us.isdigit() or kind in pinned:
            raise ConfigError(f"calibrate --core {item!r}: expected KIND=US (µs, a whole number >= 0), each kind once")
        pinned[kind] = int(us)
    return pinned


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure latencies on real backends and write a latency profile (bench.calibrate.calibrate)."""
    from bench.calibrate.calibrate import calibrate, summary_lines

    from engine.errors import ConfigError

    command = _command_line("calibrate")
    if args.store_probe and not args.refit:
        raise ConfigError("calibrate --store-probe goes with --refit (--pulsar always runs the store probe)")
    # fits to kept validations, without measuring (bench/calibrate/hops_fit.py, rates_fit.py, walk_fit.py,
    # new_txn_fit.py)
    kept = [(flag, dirs) for flag, dirs in (("--hops-from", args.hops_from), ("--rates-from", args.rates_from),
                                            ("--walk-from", args.walk_from), ("--new-txn-from", args.new_txn_from))
            if dirs]
    if len(kept) > 1:
        raise ConfigError(f"calibrate {' and '.join(flag for flag, _ in kept)}: fit one, then refit its output with "
                          "the other")
    if args.core and not args.rates_from:
        raise ConfigError("calibrate --core pins a core cost of the --rates-from fit: it goes with --rates-from")
    if args.by_process and not args.rates_from:
        raise ConfigError("calibrate --by-process splits the --rates-from fit by process: it goes with --rates-from")
    if args.watch_only:
        from bench.calibrate.calibrate import refit_watch

        if not args.refit or kept or args.store_probe or args.coordinator_only or args.redis or args.kafka or \
                args.pulsar:
            raise ConfigError("calibrate --watch-only goes with --refit PROFILE alone: it times the store's "
                              "notification hand-off for PROFILE's meta.watch and keeps the rest")
        profile = refit_watch(args.refit, args.out, command,
                              progress=lambda line: print(line, file=sys.stderr, flush=True))
        print("\n".join(summary_lines(profile)))
        return 0
    if args.coordinator_only:
        from bench.calibrate.calibrate import refit_coordinator

        if not args.refit or kept or args.store_probe or args.redis or args.kafka or args.pulsar:
            raise ConfigError("calibrate --coordinator-only goes with --refit PROFILE alone: it fits the coordinator "
                              "kinds of PROFILE again and keeps the rest")
        designs = ("v4", "v5") if args.coordinator_only == "both" else (args.coordinator_only,)
        profile = refit_coordinator(args.refit, args.out, command,
                                    progress=lambda line: print(line, file=sys.stderr, flush=True), designs=designs)
        print("\n".join(summary_lines(profile)))
        return 0
    if kept:
        from bench.calibrate.hops_fit import with_hops
        from bench.calibrate.new_txn_fit import with_new_txn
        from bench.calibrate.rates_fit import with_rates
        from bench.calibrate.walk_fit import with_walk

        flag, dirs = kept[0]
        if not args.refit or args.store_probe:
            raise ConfigError(f"calibrate {flag} goes with --refit PROFILE, and not with --store-probe")
        if args.redis or args.kafka or args.pulsar:
            raise ConfigError(f"calibrate {flag} fits to kept validations without measuring: "
                              "not with --redis, --kafka or --pulsar")
        def progress(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        if flag == "--hops-from":
            profile = with_hops(args.refit, dirs, args.out, command, progress=progress, name=args.name)
        elif flag == "--walk-from":
            profile = with_walk(args.refit, dirs, args.out, command, progress=progress, name=args.name)
        elif flag == "--new-txn-from":
            profile = with_new_txn(args.refit, dirs, args.out, command, progress=progress, name=args.name)
        else:
            profile = with_rates(args.refit, dirs, args.out, command, progress=progress, name=args.name,
                                 pinned=_pinned_cores(args.core or []), by_process=args.by_process)
        print("\n".join(summary_lines(profile)))
        return 0
    if args.refit:
        from bench.calibrate.calibrate import refit

        if args.redis or args.kafka or args.pulsar:
            raise ConfigError("calibrate --refit re-fits a profile's resources without measuring: "
                              "not with --redis, --kafka or --pulsar")
        profile = refit(args.refit, args.out, command, progress=lambda line: print(line, file=sys.stderr, flush=True),
                        store_probe=args.store_probe)
        print("\n".join(summary_lines(profile)))
        return 0
    profile = calibrate(redis=args.redis, kafka=args.kafka, pulsar=args.pulsar, admin_url=args.admin_url,
                        samples=args.samples, out=args.out, name=args.name, command=command,
                        progress=lambda line: print(line, file=sys.stderr, flush=True),
                        fresh_broker=args.fresh_broker, pulsar_dir=args.pulsar_dir,
                        client_warm_up=args.client_warm_up, warm_up_txns=_warm_up_txns(args),
                        warm_up_jit=_warm_up_jit(args))
    print("\n".join(summary_lines(profile)))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from engine.errors import ConfigError

    if not args.topic and not args.demo and (args.ledger != "memory://" or args.metadata != "memory://"):
        raise ConfigError("--topic is required with --ledger/--metadata (name the topic's ledgers; "
                          "--demo runs the embedded demo instead)")
    if args.topic and args.demo:
        raise ConfigError("--demo runs the embedded demo; it takes no --topic")
    if args.demo or not args.topic:
        from bench.replay.output import staged_dir
        from bench.scenarios.scenarios import run_scenarios

        with staged_dir(args.out, force=args.force) as tmp:
            (sc,) = run_scenarios(["migration"], tmp)
        print("\n".join(sc.findings))
        print(f"report: {Path(args.out) / 'report.html'}")
        return 0
    from bench.scenarios.migrate import migrate, summary
    from engine.backends import open_ledgers
    from metadata_v5.engine import open_store

    ledgers, store = open_ledgers(args.ledger), open_store(args.metadata)
    try:
        # migrate() prepares the PIP design's records: abort ranges unless the GC force-deletes
        print(summary(migrate(ledgers, args.topic, store, gc=GcMode(args.v5_gc), dry_run=args.dry_run)))
    finally:
        store.close()
        ledgers.close()
    return 0


def cmd_stream_load(args: argparse.Namespace) -> int:
    from bench.stream.stream import load_trace

    rows = load_trace(args.trace, args.kafka, args.topic)
    print(f"loaded {rows} events (+ start and end markers) into {args.topic} on {args.kafka}")
    return 0


def cmd_stream_run(args: argparse.Namespace) -> int:
    from bench.stream.stream_app import run_stream
    from engine.errors import ConfigError

    if args.time == "virtual":
        raise ConfigError("stream runs in wall time only")
    args.time = "wall"
    configs = _configs(args, registry.designs())
    from bench.replay.walltime import refuse_mixed

    refuse_mixed(configs, args.allow_mixed)

    def progress(done: int, total: int, rate: float) -> None:
        print(f"stream: {done}/{total} events, {rate:.0f} events/s", file=sys.stderr, flush=True)

    from bench.replay.output import check_out

    check_out(args.out, force=args.force)
    manifest = run_stream(args.kafka, args.out, configs, topic=args.topic, output_topic=args.output_topic,
                          progress=None if args.no_progress else progress, timeout_s=args.timeout, force=args.force)
    s = manifest["stream"]
    print(f"streamed {s['events']} events through {', '.join(manifest['runs'])} at {s['events_per_second']:.0f} events/s "
          f"(measurements in {s['output_topic']}, table changelog {s['table_changelog']})")
    print(f"results in {args.out}")
    return 0


def cmd_campaign(args: argparse.Namespace) -> int:
    """The lockstep/fault state machine with random seeds, in parallel (bench.check.campaign); exit 1
    if any violation was found."""
    from bench.check.campaign import run_campaign

    result = run_campaign(args.budget_s, args.histories, args.workers, redis_url=args.redis, steps=args.steps,
                          progress=None if args.no_progress else (lambda line: print(line, file=sys.stderr)))
    for line in result.lines():
        print(line)
    return 1 if result.violations else 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="txnbench", description=f"Compare Pulsar's {' and '.join(registry.designs())} (PIP-473) "
                                                  "transaction designs.")
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    p = sub.add_parser("generate", help="write a trace (Parquet) from a workload profile or an OMB workload YAML")
    p.add_argument("--profile", default=None, help="a profile name (txnbench profiles) or a profile JSON file")
    p.add_argument("--omb-workload", default=None, metavar="FILE.yaml",
                   help="an OpenMessaging Benchmark workload file, with txn fields under txnbench: (datasets/omb/)")
    p.add_argument("--events", type=_int_in(1, MAX_EVENTS), default=None,
                   help="rows to generate (required with --profile; with --omb-workload at most 1000000 by default, "
                        "or fewer when the workload's testDurationMinutes x producerRate ends first)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True)
    _add_force(p)
    p.set_defaults(fn=cmd_generate)

    p = sub.add_parser("validate-trace", help="check a trace as a replay would; print its rows, ops, topics, txns, span")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--format", default=None, choices=["parquet", "csv", "jsonl"],
                   help="the trace's format (default: by extension, else by content)")
    p.set_defaults(fn=cmd_validate_trace)

    p = sub.add_parser("wire", help="a capture of the broker's port (tcpdump -w): each Pulsar request's time on the "
                                    "wire, and the plain sends queued behind an END_TXN")
    p.add_argument("--pcap", required=True, help="the capture: tcpdump -i lo -s 0 -w FILE \"tcp port PORT\"")
    p.add_argument("--port", required=True, type=int, help="the broker's binary-protocol port (pulsar://HOST:PORT)")
    p.add_argument("--events", default=None, metavar="FILE",
                   help="a replay's pulsar-events-DESIGN.jsonl: only what the capture holds from its measured "
                        "run's start (its ready event's t0), not the client's warm-up before it")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the summary as JSON")
    p.set_defaults(fn=cmd_wire)

    p = sub.add_parser("replay", help=f"replay a trace through {', '.join(registry.designs())} or both and write results")
    p.add_argument("--trace", required=True, help="trace file: a path, or any URI pyarrow's filesystems reach "
                   "(file://, s3://, hdfs://...; with --spark, executors on other hosts read it there)")
    p.add_argument("--engine", default="both", choices=_engine_choices(disabled=True))
    p.add_argument("--out", required=True, help="result directory: a path, or with --spark a new URI on storage "
                   "every executor reaches (the spool sits beside it)")
    p.add_argument("--spark", nargs="?", const="local[*]", default=None, metavar="MASTER",
                   help="replay on Spark: local[*] (every core) when given alone, or a master such as local[2] or "
                        "spark://host:7077")
    p.add_argument("--spark-driver-host", default="127.0.0.1", metavar="ADDR",
                   help="address the Spark driver binds to and advertises (default loopback: nothing listens on "
                        "external interfaces); on a cluster, one the executors can reach")
    p.add_argument("--repeat", type=_int_in(1, 1000), default=1, metavar="N",
                   help="replay N times into one result set (repeats.json records each); the report then compares "
                        "medians by their spread (for wall-time runs). Default 1")
    _add_run_options(p)
    _add_latency_options(p)
    _add_wall_options(p)
    _add_target_options(p)
    _add_force(p)
    p.set_defaults(fn=cmd_replay)

    p = sub.add_parser("report", help="comparison report from one or more result directories")
    p.add_argument("--results", nargs="+", required=True,
                   help="result directories; the first is the baseline the others are compared with (A/B)")
    p.add_argument("--out", required=True)
    _add_force(p)
    p.add_argument("--format", choices=("files", "github"), default="files",
                   help="files: write report.html/.md/.github.md and summary.json (default); github: also print "
                        "the PR-comment Markdown (summary first, <details> for the rest)")
    p.add_argument("--fail-on", action="append", default=[], metavar="METRIC:THRESHOLD",
                   help="exit 1 if METRIC (a summary.json row id, e.g. end_txn_us.p50) got worse than the baseline "
                        "by more than THRESHOLD (10%% relative, or a number in the row's unit); repeatable")
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("compare", help="the main job: generate, replay both engines, report (no services needed)")
    p.add_argument("--profile", default="small")
    p.add_argument("--events", type=_int_in(1, MAX_EVENTS), default=50_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="txnbench-out/compare")
    p.add_argument("--no-scenarios", action="store_true",
                   help="leave out the review-question scenarios (txnbench scenarios) and their plots")
    _add_run_options(p)
    _add_latency_options(p)
    _add_wall_options(p)
    _add_target_options(p)
    _add_warm_up(p)
    _add_saturation_repeat(p)
    _add_force(p)
    p.set_defaults(fn=cmd_compare)

    p = sub.add_parser("validate", help="the same trace through the model and a real Pulsar 5 broker (both designs, "
                       "and as fast as possible for saturation): the 'model vs broker' section against the goals")
    p.add_argument("--trace", default=None, help="the trace (with --rejudge: where the trace its broker ran is now, "
                                                 "when it moved)")
    p.add_argument("--target", default=None, metavar="pulsar://HOST:PORT", help="the broker (needed, but with --rejudge)")
    p.add_argument("--rejudge", default=None, metavar="DIR",
                   help="run no broker: judge the model (--latency-profile) again against the broker runs an earlier "
                        "validate kept in DIR (its --out, or that directory packed as a .tar.xz), into --out")
    p.add_argument("--rejudge-kept", default=None, metavar="DIR",
                   help="run no broker: judge the model (--latency-profile) again against every packed broker set "
                        "under DIR (SET/broker-runs/TRACE.tar.xz, e.g. datasets/validation), each into --out/SET/TRACE, "
                        "and total their rows (--out/summary.json)")
    p.add_argument("--admin-url", default=None, metavar="URL",
                   help="the broker's admin URL (default: $TXNBENCH_PULSAR_ADMIN_URL, else http://HOST:8080)")
    p.add_argument("--pulsar-dir", default=None, metavar="DIR",
                   help="the broker's scripts/pulsar.sh DIR (default $TXNBENCH_PULSAR_DIR), for crash_broker rows "
                        "and --fresh-broker")
    p.add_argument("--drain-ms", type=_int_in(0, MAX_DRAIN_MS), default=None,
                   help="at most this long waiting for deliveries after the last row (default 30000)")
    p.add_argument("--latency-profile", default=None, metavar="FILE",
                   help="the model's latency profile, a file or a shipped name (datasets/latency/; default: pulsar-standalone-5.0.0-M1)")
    p.add_argument("--latency-seed", type=int, default=None, metavar="N",
                   help="seed of the model's latency draws (default: the trace's seed, as the broker set recorded it); "
                        "the report and validation.json say which")
    p.add_argument("--latency-seeds", default=None, metavar="A-B",
                   help="with --rejudge-kept: judge the kept sets once per seed (A-B, or A,B,...), each into "
                        "OUT/seed-N, and give the rows' spread over them (the draws alone move a record by several rows)")
    p.add_argument("--no-saturation", action="store_true",
                   help="leave out the broker's as-fast-as-possible runs (no throughput-at-saturation figure)")
    p.add_argument("--saturation-runs", type=_int_in(1, 20), default=3, metavar="N",
                   help="the broker's as-fast-as-possible runs per design; the section takes the median (default 3)")
    _add_saturation_repeat(p)
    _add_warm_up(p)
    _add_client_warm_up(p, on=True)
    p.add_argument("--fresh-broker", action="store_true",
                   help="first restart the broker with its data wiped (scripts/pulsar.sh fresh; needs --pulsar-dir): "
                        "the runs of earlier traces no longer weigh on this one's")
    p.add_argument("--calibrate", action="store_true",
                   help="measure the model's latency profile on this broker first, as `calibrate --pulsar` does (after "
                        "--fresh-broker's restart; about 12 min), into OUT/profile.json, and run its saturation trace "
                        "again after the measured runs: the section then says how far the broker moved while judged "
                        "(its rates moved 2x within half an hour here); not with --latency-profile")
    p.add_argument("--calibrate-samples", type=_int_in(10, 1_000_000), default=300, metavar="N",
                   help="--calibrate: txns per design in its probes (default 300, as the shipped profile's)")
    p.add_argument("--out", default="txnbench-out/validate")
    _add_force(p)
    p.set_defaults(fn=cmd_validate, pacing="trace")

    p = sub.add_parser("demo", help="non-transactional demo: a partition and a scalable topic that splits")
    p.add_argument("--messages", type=_int_in(1, MAX_DEMO_MESSAGES), default=12)
    p.add_argument("--dispatch", default="polling", choices=[m.value for m in DispatchMode])
    p.set_defaults(fn=cmd_demo)

    p = sub.add_parser("check", help="replay a trace with histories and check them for wrong deliveries")
    p.add_argument("--trace", default=None, help="trace to check (default: generate one from --profile)")
    p.add_argument("--profile", default="small")
    p.add_argument("--events", type=_int_in(1, MAX_EVENTS), default=5_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--engine", default="both", choices=_engine_choices(disabled=False))
    p.add_argument("--out", required=True)
    _add_run_options(p)
    _add_latency_options(p)
    _add_target_options(p)
    _add_force(p)
    p.set_defaults(fn=cmd_check)

    p = sub.add_parser("profiles", help="list the workload profiles")
    p.set_defaults(fn=cmd_profiles)
    p = sub.add_parser("stream", help="streaming replay through Kafka and faust-streaming (load, then run)")
    stream = p.add_subparsers(dest="stream_verb", required=True)
    p = stream.add_parser("load", help="validate a trace and write it to a new one-partition Kafka topic")
    p.add_argument("--trace", required=True)
    p.add_argument("--kafka", required=True, metavar="URL", help="kafka://HOST:PORT")
    p.add_argument("--topic", default="txnbench-trace")
    p.set_defaults(fn=cmd_stream_load)
    p = stream.add_parser("run", help=f"replay a loaded trace topic through {' and '.join(registry.designs())} in wall "
                                      "time; write results")
    p.add_argument("--kafka", required=True, metavar="URL", help="kafka://HOST:PORT")
    p.add_argument("--topic", default="txnbench-trace")
    p.add_argument("--output-topic", default=None, help="per-event measurements (default: TOPIC-measurements)")
    p.add_argument("--out", required=True)
    p.add_argument("--timeout", type=_float_in(0, 7 * 24 * 3600, open_lo=True), default=None, metavar="S",
                   help="give up after S seconds")
    p.add_argument("--allow-mixed", action="store_true",
                   help="run even when one engine's transaction state is in memory and the other's on a real service")
    _add_run_options(p)
    _add_force(p)
    p.set_defaults(fn=cmd_stream_run)
    p = sub.add_parser("scenarios", help="answer the PIP-473 review questions: scripted scenarios, both engines")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="sealed, polling, endtxn, recovery, recovery-open, gc, interop, restart, migration, throughput (default: all)")
    p.add_argument("--out", default="txnbench-out/scenarios")
    p.add_argument("--large", action="store_true", help="recovery also at 10^6 and 10^7 entries (slow: see the report)")
    p.add_argument("--window-s", type=_int_in(1, MAX_SCENARIO_S), default=30, help="sealed: seconds of virtual time after the commit")
    p.add_argument("--hold-s", type=_float_in(0, MAX_SCENARIO_S, open_lo=True), default=5.0, help="polling: seconds the txn stays open")
    p.add_argument("--participants", type=_int_in(1, MAX_PARTICIPANTS), nargs="+", default=None, help="endtxn: participant counts")
    p.add_argument("--sizes", type=_int_in(1, MAX_LOG_ENTRIES), nargs="+", default=None, help="recovery: log lengths")
    p.add_argument("--open-txns", type=_int_in(1, MAX_LOG_ENTRIES // 10), nargs="+", default=None, help="recovery-open: txns open at the crash")
    p.add_argument("--open-log", type=_int_in(10, MAX_LOG_ENTRIES), default=None, help="recovery-open: entries in the log (default 10000)")
    _add_latency_options(p)
    _add_force(p)
    p.set_defaults(fn=cmd_scenarios)
    p = sub.add_parser("campaign", help="run the lockstep/fault state machine with random seeds for a budget, "
                                        "in parallel processes (from a source checkout)")
    p.add_argument("--budget-s", type=_float_in(0, 7 * 24 * 3600, open_lo=True), default=300.0,
                   help="stop after this many seconds (default 300)")
    p.add_argument("--histories", type=_int_in(1, 10**9), default=10**9,
                   help="or once about this many histories are checked")
    p.add_argument("--workers", type=_int_in(1, 256), default=os.cpu_count() or 1,
                   help="parallel processes (default: one per CPU)")
    p.add_argument("--steps", type=_int_in(1, 1000), default=14, help="steps per example (default 14, as in CI)")
    p.add_argument("--redis", default=None, metavar="URL", help="also run the Redis-backed combinations on this server")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(fn=cmd_campaign)
    p = sub.add_parser("calibrate", help="measure operation latencies on real backends and write a latency profile")
    p.add_argument("--redis", default=None, metavar="URL", help="the v5 metadata store's operations on redis://HOST:PORT")
    p.add_argument("--kafka", default=None, metavar="URL", help="ledger append/read on kafka://HOST:PORT")
    p.add_argument("--pulsar", default=None, metavar="URL", help="a Pulsar 5 broker, pulsar://HOST:PORT (needs --admin-url)")
    p.add_argument("--admin-url", default=None, metavar="URL", help="the broker's admin URL, http://HOST:PORT")
    p.add_argument("--samples", type=_int_in(10, 1_000_000), default=2_000, help="timed calls per operation (default 2000)")
    p.add_argument("--name", default=None, help="the profile's name (default: the backends', e.g. redis-local)")
    p.add_argument("--pulsar-dir", default=None, metavar="DIR",
                   help="the broker's scripts/pulsar.sh DIR (default $TXNBENCH_PULSAR_DIR), for --fresh-broker")
    p.add_argument("--fresh-broker", action="store_true",
                   help="first restart the broker with its data wiped (scripts/pulsar.sh fresh; needs --pulsar-dir), "
                        "as validate --fresh-broker does: a broker's rates follow its state")
    _add_client_warm_up(p, "--pulsar: in each of its runs, the trace client", on=True)
    _add_warm_up_txns(p, "--pulsar: first, discarded as-fast-as-possible runs of the saturation trace warm the "
                         "broker as validate warms it: at least one, and")
    p.add_argument("--refit", default=None, metavar="PROFILE",
                   help="measure nothing: fit PROFILE's resources again, by this version's model, to the broker's "
                        "saturated rates PROFILE recorded, and write it to --out")
    _add_kept_fit(p, "--rates-from", "fit PROFILE's host cores (resource cpu: core time per client request, "
                  "broker-internal request and delivery) and its bookie to the broker's runs at saturation (and the "
                  "machine's busy cores over them) that", "rates_fit",
                  "every other operation and the metadata writes stay")
    p.add_argument("--core", action="append", default=None, metavar="KIND=US",
                   help="with --rates-from: pin KIND's core time per call (rpc, rpc.broker or consumer.deliver) "
                        "at US µs, unscaled, and fit the other kinds to what is left; repeatable")
    p.add_argument("--by-process", action="store_true",
                   help="with --rates-from: fit the broker's process and the rest of the machine (the trace client) "
                        "apart, each by the kinds that work in it (rpc.broker and dispatch.entry in the broker alone), "
                        "from the broker's busy cores the validations recorded beside the machine's")
    _add_kept_fit(p, "--hops-from", "scale PROFILE's rpc, consumer.deliver and ledger.append (one factor, their "
                  "shape kept) to the v4 plain publish p50 the broker answered at, as", "hops_fit",
                  "every other kind and the resources stay")
    _add_kept_fit(p, "--walk-from", "fit PROFILE's listing walk (meta.list_keys, µs per thousand keys) to the "
                  "broker's v5 runs at saturation, each from the txns it started from, that", "walk_fit",
                  "every other kind and the resources stay")
    _add_kept_fit(p, "--new-txn-from", "fit PROFILE's v4 coordinator handling (coordinator.v4: its p50, then a tail "
                  "above its p90) to the v4 new-txn p50 and p99 the broker answered at, as", "new_txn_fit",
                  "every other kind and the resources stay")
    p.add_argument("--coordinator-only", nargs="?", const="both", default=None, choices=("v4", "v5", "both"),
                   metavar="DESIGN",
                   help="with --refit: fit only the coordinator requests' handling (coordinator.v4/v5, or DESIGN's "
                        "alone: v4 or v5) again, by this version's model, to the txn probes' new-txn PROFILE recorded; "
                        "every other kind, the resources and the kept fits stay (bench/calibrate/coordinator_fit.py)")
    p.add_argument("--watch-only", action="store_true",
                   help="with --refit: only time the metadata store's notification hand-off with the broker's classes "
                        "on this machine (needs Java 17 and the Pulsar jars) and take PROFILE's meta.watch from it; "
                        "every other kind, the resources and the fits stay (bench/calibrate/store_probe.py)")
    p.add_argument("--store-probe", action="store_true",
                   help="with --refit: first time the emulated store scan's per-record GET (meta.scan_get) with the "
                        "broker's classes on this machine, as --pulsar does (needs Java 17 and the Pulsar jars)")
    p.add_argument("--out", required=True, metavar="FILE", help="the profile file to write (JSON)")
    p.set_defaults(fn=cmd_calibrate)
    p = sub.add_parser("migrate", help="migrate a topic's v4 transaction state to v5 metadata (or --demo)")
    p.add_argument("--topic", nargs="+", default=None, metavar="LEDGER", help="the topic's ledger(s): partition or segments")
    p.add_argument("--ledger", default="memory://", help="ledger URL holding the v4 data (kafka://HOST:PORT)")
    p.add_argument("--metadata", default="memory://", help="v5 metadata store URL (redis://HOST:PORT)")
    p.add_argument("--v5-gc", default=GcMode.WAIT.value, choices=[GcMode.WAIT.value, GcMode.FORCE.value],
                   help="the GC the PIP-design readers of the migrated data run: wait (abort ranges kept) or "
                        "force (the PIP's sweep); 5.0.1 migrates no txn state")
    p.add_argument("--dry-run", action="store_true", help="derive and print the plan; write nothing")
    p.add_argument("--demo", action="store_true", help="embedded demo: migrate a v4 topic, compare readers, roll back")
    p.add_argument("--out", default="txnbench-out/migrate")
    _add_force(p)
    p.set_defaults(fn=cmd_migrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:  # the parser imports what --version and the verbs' defaults need: Ctrl-C may come here
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("txnbench: interrupted", file=sys.stderr)
        return 130
    fn: Callable[[argparse.Namespace], int] = args.fn

    def terminate(signum: int, frame: object) -> None:
        raise Terminated(signum)

    handled = (signal.SIGTERM, signal.SIGHUP)
    previous = {}
    try:
        for sig in handled:  # only the main thread may install handlers (tests may call main elsewhere)
            previous[sig] = signal.signal(sig, terminate)
    except ValueError:
        pass
    try:
        return fn(args)
    except TxnbenchError as exc:
        message = " ".join(str(exc).split())  # one line, even when a driver's text has several
        print(f"txnbench {args.verb}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # a full disk, a read-only file system: output is already cleaned up
        from bench.replay.output import describe_os_error

        print(f"txnbench {args.verb}: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Terminated as exc:
        print(f"txnbench {args.verb}: terminated by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(f"txnbench {args.verb}: interrupted", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
