from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.trace.trace import read_events, trace_metadata, validate
from bench.trace.workloads import Profile, generate, list_profiles, load_profile
from engine.errors import ConfigError


@pytest.mark.parametrize("name", list_profiles())
def test_every_profile_generates_a_valid_deterministic_trace(tmp_path: Path, name: str) -> None:
    profile = load_profile(name)
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    rows = generate(profile, 1500, 7, a)
    generate(profile, 1500, 7, b)
    assert validate(a) == rows >= 1500
    assert a.read_bytes() == b.read_bytes()
    assert trace_metadata(a) == {"profile": name, "seed": "7", "events": "1500"}
    ops = {e.op for e in read_events(a)}
    assert {"subscribe", "publish"} <= ops
    if profile.txn_fraction:
        assert {"new_txn", "commit"} <= ops


def test_seed_changes_the_trace(tmp_path: Path) -> None:
    generate(load_profile("small"), 500, 1, tmp_path / "a.parquet")
    generate(load_profile("small"), 500, 2, tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() != (tmp_path / "b.parquet").read_bytes()


def test_bad_profiles_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        load_profile("nope")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "frobs": 1}))
    with pytest.raises(ConfigError, match="unknown profile fields frobs"):
        load_profile(str(bad))
    with pytest.raises(ConfigError, match="fractions"):
        Profile.from_dict({"name": "x", "abort_ratio": 2})
    with pytest.raises(ConfigError, match="--events"):
        generate(load_profile("small"), 0, 1, tmp_path / "x.parquet")


SAMPLES = Path(__file__).resolve().parents[2] / "datasets" / "samples"


def test_every_profile_has_a_committed_sample_that_the_generator_reproduces(tmp_path: Path) -> None:
    """``datasets/samples/<profile>.parquet`` is exactly what ``txnbench generate --profile
    <profile> --events 2000 --seed 1`` writes; regenerate them with that command after changing
    the generator or a profile."""
    import pyarrow.parquet as pq

    assert sorted(p.stem for p in SAMPLES.glob("*.parquet")) == list_profiles()
    for sample in sorted(SAMPLES.glob("*.parquet")):
        meta = trace_metadata(sample)
        assert meta == {"profile": sample.stem, "seed": "1", "events": "2000"}, sample
        again = tmp_path / sample.name
        generate(load_profile(sample.stem), 2000, 1, again)
        assert pq.read_table(sample).equals(pq.read_table(again)), f"{sample} is stale: regenerate it"
        assert validate(sample) > 0
