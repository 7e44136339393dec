"""Traces and result directories as URIs (bench.scale.storage), as a Spark replay on a cluster uses them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from bench.scale import storage
from bench.replay.config import RunConfig
from bench.scale.spark import _row_parts, spark_replay
from bench.trace.trace import read_events, trace_metadata, validate
from bench.trace.workloads import generate, load_profile
from engine.errors import BackendUnavailable, ConfigError, TraceError


def test_uris_and_paths_are_told_apart() -> None:
    assert storage.is_uri("file:///data/t.parquet")
    assert storage.is_uri("s3://bucket/traces/t.parquet")
    assert storage.is_uri("hdfs://nn:8020/t.parquet")
    assert not storage.is_uri("/data/t.parquet")
    assert not storage.is_uri("t.parquet")
    assert not storage.is_uri("C://data")  # a drive letter, not a scheme
    assert not storage.is_uri(Path("/data/t.parquet"))


def test_locations_are_joined_on_uris_and_paths_alike(tmp_path: Path) -> None:
    assert storage.child("s3://b/runs/", "progress") == "s3://b/runs/progress"
    assert storage.sibling("s3://b/runs/r1", ".r1.spool") == "s3://b/runs/.r1.spool"
    assert storage.basename("s3://b/runs/r1/") == "r1"
    assert storage.sibling(tmp_path / "r1", ".r1.spool") == str(tmp_path / ".r1.spool")


def test_an_unreachable_scheme_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"--out nosuch://x/y: no pyarrow filesystem reaches it"):
        storage.resolve("nosuch://x/y", "--out")


def test_a_trace_is_read_and_validated_through_a_file_uri(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 300, 3, trace)
    uri = trace.as_uri()
    assert validate(uri) == validate(trace) == pq.ParquetFile(trace).metadata.num_rows
    assert list(read_events(uri)) == list(read_events(trace))
    assert trace_metadata(uri) == trace_metadata(trace)
    with pytest.raises(TraceError, match="no such trace file"):
        validate((tmp_path / "missing.parquet").as_uri())


def _result_dir(root: Path) -> Path:
    root.mkdir()
    (root / "counts.json").write_text("{}")
    (root / "plots").mkdir()
    (root / "plots" / "a.png").write_bytes(b"png")
    (root / "manifest.json").write_text(json.dumps({"runs": {}}))
    return root


def test_a_result_dir_is_published_to_a_uri_manifest_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = _result_dir(tmp_path / "local")
    copied: list[str] = []
    real_copy = pafs.copy_files

    def copy(src: str, dst: str, **kw: object) -> None:
        copied.append(dst.rsplit("/", 1)[-1])
        real_copy(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(storage.pafs, "copy_files", copy)
    dest = (tmp_path / "remote" / "run1").as_uri()
    storage.publish_dir(local, dest)
    assert copied[-1] == "manifest.json" and sorted(copied) == ["a.png", "counts.json", "manifest.json"]
    published = tmp_path / "remote" / "run1"
    assert (published / "plots" / "a.png").read_bytes() == b"png"
    assert json.loads((published / "manifest.json").read_text()) == {"runs": {}}
    with pytest.raises(ConfigError, match="exists; give a new location"):
        storage.publish_dir(local, dest)


def test_a_failed_publication_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = _result_dir(tmp_path / "local")
    real_copy = pafs.copy_files
    calls = []

    def failing_copy(src: str, dst: str, **kw: object) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("store went away")
        real_copy(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(storage.pafs, "copy_files", failing_copy)
    with pytest.raises(OSError, match="store went away"):
        storage.publish_dir(local, (tmp_path / "remote" / "run1").as_uri())
    assert not (tmp_path / "remote" / "run1").exists()


def test_spark_refuses_an_existing_uri_out_before_starting(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("nontxn"), 100, 1, trace)
    (tmp_path / "out").mkdir()
    with pytest.raises(ConfigError, match="exists; give a new location"):
        spark_replay(trace.as_uri(), [RunConfig(engine="v4")], (tmp_path / "out").as_uri(), master="local[1]")


def test_rows_written_where_the_driver_cannot_see_them_are_refused(tmp_path: Path) -> None:
    rows = tmp_path / "spool" / "rows" / "delivery"
    rows.mkdir(parents=True)
    (rows / "shard-0-v4.parquet").write_bytes(b"")
    fs, parts = _row_parts(str(tmp_path / "spool"), "delivery", [(0, "v4")])
    assert parts == [str(rows / "shard-0-v4.parquet")]
    with pytest.raises(BackendUnavailable, match=r"shard-1-v4\.parquet.*give --out as a URI"):
        _row_parts(str(tmp_path / "spool"), "delivery", [(0, "v4"), (1, "v4")])


def test_a_uri_out_without_spark_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    trace = tmp_path / "t.parquet"
    generate(load_profile("nontxn"), 100, 1, trace)
    out = (tmp_path / "out").as_uri()
    assert main(["replay", "--trace", trace.as_uri(), "--engine", "v4", "--no-progress", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--out {out}: a URI needs --spark; give a local directory") and "\n" not in err
    assert not (tmp_path / "out").exists()
    assert main(["replay", "--trace", trace.as_uri(), "--engine", "v4", "--no-progress",
                 "--out", str(tmp_path / "local")]) == 0  # a URI trace replays in-process
    assert (tmp_path / "local" / "manifest.json").is_file()
