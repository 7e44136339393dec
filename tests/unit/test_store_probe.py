"""The store probe's figures (bench.calibrate.store_probe) and how a profile takes them
(bench.calibrate.calibrate.with_scan_get and with_watch, ``calibrate --refit --store-probe`` and
``--watch-only``)."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from bench.calibrate import store_probe
from bench.calibrate.calibrate import with_scan_get, with_watch
from bench.cli import main
from engine.clock import Distribution
from engine.errors import BackendUnavailable
from engine.profile import LatencyProfile

DEFAULT = "datasets/latency/pulsar-standalone-5.0.0-M1.json"


PER_KEY, PER_ENTRY = 0.5, 0.1  # µs: the walk the lines below are made from
DECODE = 0.7  # µs per record the cleanup scan's filter decodes, in the runs with 100 records or more


def _run(history: int, live: int, gets: dict[str, float] | None, ops: int = 1) -> dict[str, Any]:
    children = history + live * ops  # every txn's counter, and the live txns' records
    hidden = (history - live) * (3 * ops - 1) + live * (ops - 1)  # counter versions, deleted records' put + tombstone
    return {"history": history, "live": live, "ops": ops, "repeats": 10, "children": children, "scanned": ops,
            "scan_us": 10.0, "writes_scan_us": 10.0 + (DECODE if live * ops >= 100 else 9.0) * live * ops,
            "list_us": PER_KEY * children + PER_ENTRY * hidden, "gets_us": 1.0 * live, "get_us": 4.0,
            **({"store_get_us": gets} if gets is not None else {})}


PROBE_LINES = [_run(1_000, 1, {"p50": 4.4, "p90": 14.2}),
               _run(1_000, 200, {"p50": 1.1, "p90": 1.9, "p99": 5.6, "max": 166.2}),
               _run(4_000, 1, {"p50": 8.6}),
               _run(4_000, 200, {"p50": 0.4, "p90": 1.2, "p99": 2.0, "max": 107.0}),
               _run(1_000, 1, {"p50": 0.9}, ops=10),
               _run(4_000, 200, {"p50": 0.3, "p90": 0.5, "p99": 0.9, "max": 9.0}, ops=10)]


def test_the_scan_get_is_the_run_with_the_most_live_records_and_the_walk_is_split_by_key_and_entry() -> None:
    got = store_probe.summarise(PROBE_LINES)
    # from the runs with one op per txn: the GETs' own cost, not how many records a txn has
    assert got["scan_get_us"] == {"p50": 0.4, "p90": 1.2, "p99": 2.0, "max": 107.0}
    assert got["scan_get_from"] == {"history": 4_000, "live": 200}
    per_thousand = {k: statistics.median(r["list_us"] * 1000 / r["children"] for r in PROBE_LINES if r["ops"] == k)
                    for k in (1, 10)}
    assert got["walk_us_per_thousand"] == pytest.approx(per_thousand[1], abs=0.05)
    assert got["walk_us_per_thousand_by_ops"] == {k: pytest.approx(v, abs=0.05) for k, v in
                                                  (("1", per_thousand[1]), ("10", per_thousand[10]))}
    assert per_thousand[10] > 3 * per_thousand[1]  # a key costs more the more entries hide behind it
    assert got["walk_fit"] == {"us_per_key": pytest.approx(PER_KEY, abs=0.001),
                               "us_per_hidden_entry": pytest.approx(PER_ENTRY, abs=0.0001)}
    assert got["runs"] == PROBE_LINES
    # whole µs for the profile: at least 1, never decreasing
    assert store_probe.scan_get_spec(got) == {"p50": 1, "p90": 1, "p99": 2, "max": 107}


BASE, PER_LISTENER = 0.3, 0.005  # µs per notification, and per listener it runs
NOTIFY_LINES = [{"listeners": n, "writes": 500, "repeats": 20, "notifications": 3_001,
                 "us_per_notification": BASE + PER_LISTENER * n} for n in (0, 1_000, 2_000)]


def test_the_cleanup_scans_decoding_and_the_notification_fan_out_are_recorded_beside_the_scan() -> None:
    got = store_probe.summarise(PROBE_LINES, NOTIFY_LINES)
    # the scans of a few records say little about a per-record cost: only those of 100 or more count
    assert got["decode_us_per_record"] == pytest.approx(DECODE)
    assert got["notify_runs"] == NOTIFY_LINES
    assert got["notify_fit"] == {"us_per_notification": pytest.approx(BASE), "us_per_listener": pytest.approx(PER_LISTENER),
                                 "up_to": 2_000, "notifications_per_key": 3.0}
    text = store_probe.note(got)
    assert f"{DECODE} µs per record" in text and f"{PER_LISTENER} per listener" in text
    assert store_probe.notify_spec(got) == {"p50": round(PER_LISTENER * 1000)}  # µs per thousand listener calls
    # without the fan-out lines (a probe of before), the scan's figures stand alone
    alone = store_probe.summarise(PROBE_LINES)
    assert "notify_fit" not in alone and "notify_runs" not in alone and store_probe.notify_spec(alone) is None
    assert store_probe.notify_cost(NOTIFY_LINES[:1]) == {"notify_runs": NOTIFY_LINES[:1]}  # one count: no slope


HANDOFF_LINE = {"handoffs": 2_000, "put_us": {"p50": 23.6, "p90": 31.0, "p99": 48.1, "max": 92.7},
                "listener_us": {"p50": 14.5, "p90": 21.4, "p99": 36.4, "max": 110.1}}


def test_the_hand_off_to_the_event_thread_is_recorded_apart_from_the_fan_out() -> None:
    got = store_probe.summarise(PROBE_LINES, [*NOTIFY_LINES, HANDOFF_LINE])
    assert got["handoff"] == HANDOFF_LINE
    assert got["notify_runs"] == NOTIFY_LINES  # the hand-off's line is not a listener count
    assert got["notify_fit"]["us_per_listener"] == pytest.approx(PER_LISTENER)
    assert "a put's listener starting 14.5 µs after its call at the median (p99 36.4, the put returning after 23.6)" \
        in store_probe.note(got)
    assert "handoff" not in store_probe.summarise(PROBE_LINES, NOTIFY_LINES)  # a probe of before


def test_runs_that_cannot_separate_keys_from_entries_give_no_fit() -> None:
    """The same run twice says nothing about how its time splits between keys and entries."""
    same = [_run(1_000, 0, {"p50": 1.0})] * 2
    assert store_probe.walk_fit(same) is None
    assert store_probe.summarise(same)["walk_fit"] is None


def test_a_probe_that_timed_no_get_is_an_error() -> None:
    with pytest.raises(BackendUnavailable, match="no run timed a storeGet"):
        store_probe.summarise([_run(1_000, 0, None)])


def test_a_profile_takes_the_scan_get_with_its_provenance_and_keeps_its_fits_notes_last() -> None:
    shipped = LatencyProfile.load(DEFAULT)
    assert shipped.provenance["kinds"]["meta.scan_get"]["how"] == "probe"  # the default was probed: its note goes
    assert shipped.provenance["notes"].count("meta.scan_get [pulsar]: ") == 1
    base = shipped.derived(operations={**shipped.operations, "meta.scan_get": shipped.operations["meta.read"],
                                       "meta.notify": Distribution.constant(0)})
    probe = store_probe.summarise(PROBE_LINES)
    got = with_scan_get(base, probe)
    assert got.operations["meta.scan_get"] == Distribution(((0.5, 1), (0.9, 1), (0.99, 2), (1.0, 107)))
    assert {k: v for k, v in got.operations.items() if k != "meta.scan_get"} == \
        {k: v for k, v in base.operations.items() if k != "meta.scan_get"}
    assert got.provenance["kinds"]["meta.scan_get"]["how"] == "probe"
    assert got.provenance["extra"]["pulsar.store_probe"] == probe
    notes, old = got.provenance["notes"], base.provenance["notes"]
    at, fits = notes.index("meta.scan_get [pulsar]: "), notes.index("; rpc, consumer.deliver (re-fitted")
    assert at < fits and notes.endswith(old[old.index("; rpc, consumer"):])
    assert notes[:at] == old[:old.index("meta.scan_get [pulsar]: ")]  # the measurement's notes before it stay
    assert notes.count("meta.scan_get [pulsar]: ") == 1
    assert "0.5 µs per key returned + 0.1 per entry passed" in notes
    # the shipped probe's note is gone whole, the part after its "; " too
    assert notes.count("the listing's walk alone") == 1
    # a second probe replaces the first's note
    again = with_scan_get(got, store_probe.summarise(PROBE_LINES[:2]))
    assert again.provenance["notes"].count("meta.scan_get [pulsar]: ") == 1
    assert again.provenance["notes"].count("the listing's walk alone") == 1
    assert again.provenance["notes"].endswith(old[old.index("; rpc, consumer"):])
    assert again.operations["meta.scan_get"] == Distribution(((0.5, 1), (0.9, 2), (0.99, 6), (1.0, 166)))
    assert "µs per thousand keys at 1 op(s) per txn" in again.provenance["notes"]
    back = LatencyProfile.from_json(got.to_json())
    assert back.operations == got.operations
    # a probe that timed the notification fan-out prices meta.notify too; one that did not leaves it
    assert got.operations["meta.notify"] == base.operations["meta.notify"] == Distribution.constant(0)
    fan = with_scan_get(base, store_probe.summarise(PROBE_LINES, NOTIFY_LINES))
    assert fan.operations["meta.notify"] == Distribution.constant(round(PER_LISTENER * 1000))
    assert fan.provenance["kinds"]["meta.notify"]["how"] == "probe"
    assert got.provenance["kinds"].get("meta.notify") == base.provenance["kinds"].get("meta.notify")  # untouched
    assert f"{PER_LISTENER} per listener" in fan.provenance["kinds"]["meta.notify"]["source"]
    assert LatencyProfile.from_json(fan.to_json()).operations == fan.operations


def test_refit_with_the_store_probe_bills_the_scan_gets_the_probe_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's figure is in the profile the resources were fitted with."""
    from bench.calibrate import saturation

    monkeypatch.setattr(store_probe, "measure", lambda progress: store_probe.summarise(PROBE_LINES))
    seen: list[Distribution] = []

    def fit(profile: LatencyProfile, rates: dict[str, float], measured: dict[str, object]) -> tuple[LatencyProfile, str]:
        seen.append(profile.operations["meta.scan_get"])
        return profile, "the fit"

    monkeypatch.setattr(saturation, "with_resources", fit)
    out = tmp_path / "p.json"
    assert main(["calibrate", "--refit", DEFAULT, "--store-probe", "--out", str(out)]) == 0
    want = Distribution(((0.5, 1), (0.9, 1), (0.99, 2), (1.0, 107)))
    assert seen == [want] and LatencyProfile.load(out).operations["meta.scan_get"] == want


def test_the_store_probe_goes_with_refit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--store-probe", "--redis", "redis://127.0.0.1:1", "--out", str(tmp_path / "p.json")]) == 2
    assert "--store-probe goes with --refit" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_meta_watch_is_the_hand_offs_listener_start_its_note_in_the_place_of_the_one_before() -> None:
    """``with_watch``: the kind from the line's ``listener_us`` (whole µs, non-decreasing), its
    provenance entry and note (where the kind's note was, or first), the line recorded beside the
    probe's; every other kind, the resources and every other note as they were."""
    assert store_probe.watch_spec(HANDOFF_LINE) == {"p50": 14, "p90": 21, "p99": 36, "max": 110}
    assert store_probe.watch_spec({"listener_us": {"p50": 0.2, "p90": 0.1, "p99": 3.6}}) == \
        {"p50": 1, "p90": 1, "p99": 4}
    constants = LatencyProfile.constants()
    assert constants.operations["meta.watch"] == Distribution.constant(500)
    before = ("cursor.empty_read [pulsar]: not measurable: x; meta.watch [pulsar]: not measurable: y; "
              "ledger.append [pulsar]: z")
    base = constants.derived(provenance={**constants.provenance, "notes": before,
                                         "extra": {"pulsar.store_probe": {"scan_get_us": {"p50": 1}}}})
    got = with_watch(base, HANDOFF_LINE, "timed then")
    assert got.operations["meta.watch"] == Distribution(((0.5, 14), (0.9, 21), (0.99, 36), (1.0, 110)))
    assert {k: v for k, v in got.operations.items() if k != "meta.watch"} == \
        {k: v for k, v in base.operations.items() if k != "meta.watch"}
    assert got.resources == base.resources
    kind = got.provenance["kinds"]["meta.watch"]
    assert kind["how"] == "probe" and kind["source"].startswith("a put's listener starting 14.5 µs after its call")
    assert kind["source"].endswith("(timed then)")
    assert got.provenance["extra"]["pulsar.store_probe"] == {"scan_get_us": {"p50": 1}, "handoff": HANDOFF_LINE}
    notes = got.provenance["notes"]
    assert notes.startswith("cursor.empty_read [pulsar]: not measurable: x; meta.watch [pulsar]: a put's listener")
    assert notes.endswith("(timed then); ledger.append [pulsar]: z") and "not measurable: y" not in notes
    # again: the note replaced, not added; on a profile with no note of the kind, it goes first
    again = with_watch(got, {**HANDOFF_LINE, "listener_us": {"p50": 20.0, "p90": 30.0, "p99": 50.0, "max": 90.0}})
    assert again.provenance["notes"].count("meta.watch [pulsar]: ") == 1
    assert again.provenance["notes"].endswith("; ledger.append [pulsar]: z") and "20.0 µs" in again.provenance["notes"]
    bare = with_watch(constants.derived(provenance={**constants.provenance, "notes": "ledger.append [pulsar]: z"}),
                      HANDOFF_LINE)
    assert bare.provenance["notes"].startswith("meta.watch [pulsar]: ")
    assert bare.provenance["notes"].endswith("; ledger.append [pulsar]: z")
    assert LatencyProfile.from_json(got.to_json()).operations == got.operations
    # a structural refit's probe that timed the hand-off takes meta.watch from it too
    probed = with_scan_get(base, store_probe.summarise(PROBE_LINES, [*NOTIFY_LINES, HANDOFF_LINE]))
    assert probed.operations["meta.watch"] == got.operations["meta.watch"]
    unprobed = with_scan_get(base, store_probe.summarise(PROBE_LINES))
    assert unprobed.operations["meta.watch"] == Distribution.constant(500)


def test_a_watch_only_refit_takes_meta_watch_and_keeps_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``calibrate --refit PROFILE --watch-only``: the probe's hand-off alone, nothing fitted again."""
    monkeypatch.setattr(store_probe, "measure_handoff", lambda progress: HANDOFF_LINE)
    out = tmp_path / "w.json"
    assert main(["calibrate", "--refit", DEFAULT, "--watch-only", "--out", str(out)]) == 0
    got, shipped = LatencyProfile.load(out), LatencyProfile.load(DEFAULT)
    assert got.operations == {**shipped.operations, "meta.watch": Distribution(((0.5, 14), (0.9, 21), (0.99, 36),
                                                                                (1.0, 110)))}
    assert got.resources == shipped.resources
    assert re.search(r"\(timed \d{4}-\d\d-\d\dT[\d:]+Z by `txnbench calibrate[^`]*`\)$",
                     got.provenance["kinds"]["meta.watch"]["source"])
    for bad in (["calibrate", "--watch-only", "--out", str(tmp_path / "x.json")],
                ["calibrate", "--refit", DEFAULT, "--watch-only", "--store-probe", "--out", str(tmp_path / "x.json")]):
        assert main(bad) == 2
        assert "--watch-only goes with --refit PROFILE alone" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
