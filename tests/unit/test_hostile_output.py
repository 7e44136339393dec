"""Issue 20, outputs: nothing lost, nothing half-written, no write through a planted link.

Each test reproduces one failure of the hostile campaign through the CLI: an existing ``--out``
(with the user's files, or the input trace) refused, ``--force`` replacing only what txnbench
wrote, symlinks never followed, and every exit path (error, full disk, SIGTERM, SIGHUP) leaving
the complete result or nothing.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.replay.output import MARKER
from tests.terminal import popen_with_ctrl_c

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err and ": error: " in err, err


def hidden(d: Path) -> list[str]:
    """Staging leftovers: hidden entries txnbench might have left in ``d``."""
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".") and p.name != MARKER)


@pytest.fixture
def trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "in" / "trace.parquet"
    code, _, err = run(capsys, "generate", "--profile", "small", "--events", "300", "--out", str(path))
    assert code == 0, err
    return path


def replay(capsys: pytest.CaptureFixture[str], trace: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    return run(capsys, "replay", "--trace", str(trace), "--engine", "v5", "--drain-ms", "1000", "--no-progress",
               "--out", str(out), *extra)


def test_replay_refuses_a_directory_holding_the_users_files_even_with_force(
        tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the campaign's worst case: replay --out DIR deleted everything in DIR, the input trace too
    out = trace.parent
    (out / "notes.txt").write_text("mine")
    for extra in ((), ("--force",)):
        code, _, err = replay(capsys, trace, out, *extra)
        assert code == 2 and "--out" in err
        one_line(err)
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "trace.parquet"]
    assert (out / "notes.txt").read_text() == "mine"


def test_force_replaces_only_what_txnbench_wrote(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "res"
    assert replay(capsys, trace, out)[0] == 0
    first = json.loads((out / "manifest.json").read_text())["finished_at"]
    code, _, err = replay(capsys, trace, out)
    assert code == 2 and "pass --force" in err  # never silently overwritten
    one_line(err)
    (out / "mine.txt").write_text("keep me")
    time.sleep(1.1)  # finished_at has a resolution of a second
    code, _, err = replay(capsys, trace, out, "--force")
    assert code == 0, err
    assert (out / "mine.txt").read_text() == "keep me"
    assert json.loads((out / "manifest.json").read_text())["finished_at"] != first
    assert hidden(tmp_path) == [] and hidden(out) == []


def test_force_never_replaces_the_input_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "chk"
    code, _, err = run(capsys, "check", "--profile", "small", "--events", "300", "--engine", "v5", "--drain-ms", "1000",
                       "--out", str(out))
    assert code == 0, err
    trace = out / "trace.parquet"  # written by the first check, so listed as txnbench's
    before = trace.read_bytes()
    code, _, err = run(capsys, "check", "--trace", str(trace), "--engine", "v5", "--drain-ms", "1000",
                       "--out", str(out), "--force")
    assert code == 0, err
    assert trace.read_bytes() == before and (out / "check.json").is_file()
    assert "trace.parquet" in (out / MARKER).read_text().split()


def test_planted_symlinks_are_replaced_not_followed(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    assert replay(capsys, trace, res)[0] == 0
    rep = tmp_path / "rep"
    assert run(capsys, "report", "--results", str(res), "--out", str(rep))[0] == 0
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for name in ("report.md", "summary.json"):
        (rep / name).unlink()
        (rep / name).symlink_to(victim)
    code, _, err = run(capsys, "report", "--results", str(res), "--out", str(rep), "--force")
    assert code == 0, err
    assert victim.read_text() == "precious"
    assert not (rep / "report.md").is_symlink() and "txnbench" in (rep / "report.md").read_text()
    # a planted link as --out itself, or as the trace's partial file
    link = tmp_path / "link"
    link.symlink_to(victim)
    code, _, err = run(capsys, "report", "--results", str(res), "--out", str(link), "--force")
    assert code == 2 and "symbolic link" in err
    code, _, err = run(capsys, "generate", "--profile", "small", "--events", "10", "--out", str(link), "--force")
    assert code == 2 and victim.read_text() == "precious"
    (tmp_path / ".t.parquet.partial").symlink_to(victim)
    assert run(capsys, "generate", "--profile", "small", "--events", "10", "--out", str(tmp_path / "t.parquet"))[0] == 0
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("verb", ["replay", "check", "report", "scenarios", "compare", "migrate"])
@pytest.mark.parametrize("where", ["file", "file/child", "."])
def test_bad_out_paths_are_one_line(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str], verb: str, where: str) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    out = "." if where == "." else str(tmp_path / where)
    argv = {"replay": ["replay", "--trace", str(trace), "--engine", "none"],
            "check": ["check", "--trace", str(trace), "--engine", "v5"],
            "report": ["report", "--results", str(tmp_path)],
            "scenarios": ["scenarios", "interop"], "compare": ["compare", "--events", "100", "--no-scenarios"],
            "migrate": ["migrate", "--demo"]}[verb]
    code, _, err = run(capsys, *argv, "--out", out)
    assert code == 2
    one_line(err)
    assert f.read_text() == "x" and hidden(tmp_path) == []


def test_compare_twice_shows_only_the_second_runs_contents(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.scenarios.scenarios as sc

    real = sc.run_scenarios
    monkeypatch.setattr(sc, "run_scenarios", lambda *a, **k: real(["interop"]))  # one fast scenario
    out = tmp_path / "cmp"
    base = ["compare", "--events", "300", "--drain-ms", "1000", "--no-progress", "--latency-profile", "constants",
            "--out", str(out)]
    assert run(capsys, *base)[0] == 0
    assert (out / "scenarios.json").is_file()
    assert "interop" in (out / "report" / "report.md").read_text().lower()
    code, _, err = run(capsys, *base, "--no-scenarios", "--force")
    assert code == 0, err
    assert not (out / "scenarios.json").exists()
    md = (out / "report" / "report.md").read_text()
    assert "interop" not in md.lower()
    assert str(tmp_path / ".cmp") not in md and str(out / "results") in md  # no staging path in the text
    assert hidden(tmp_path) == []


def test_a_full_disk_leaves_no_output(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.report.plots as plots

    res = tmp_path / "res"
    assert replay(capsys, trace, res)[0] == 0

    def full(fig: object, path: Path) -> str:
        path.write_bytes(b"")  # what savefig leaves when the disk fills
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(plots, "_save", full)
    code, _, err = run(capsys, "report", "--results", str(res), "--out", str(tmp_path / "rep"))
    assert code == 2 and "No space left on device" in err
    one_line(err)
    assert not (tmp_path / "rep").exists() and hidden(tmp_path) == []


def test_failed_commands_leave_no_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    for argv in (["check", "--profile", "nosuch"], ["check", "--v5-option", "bogus=1"],
                 ["check", "--events", "50", "--metadata", "redis://127.0.0.1:1"]):
        code, _, err = run(capsys, *argv, "--out", str(out))
        assert code == 2, argv
        one_line(err)
        assert not out.exists() and hidden(tmp_path) == [], argv


def _wait_for_staging(parent: Path, proc: subprocess.Popen[bytes], prefix: str) -> None:
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(prefix) for p in parent.iterdir()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signals_leave_the_complete_result_or_nothing(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "cmp"
    proc = popen_with_ctrl_c([sys.executable, "-m", "bench", "compare", "--events", "400000", "--no-scenarios",
                              "--no-progress", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for_staging(tmp_path, proc, ".cmp.")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if sig == signal.SIGINT else 128 + sig), err
    text = err.decode()
    assert text.count("\n") == 1 and "Traceback" not in text, text
    assert list(tmp_path.iterdir()) == []


def test_sigterm_during_generate_leaves_no_partial_file(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "bench", "generate", "--profile", "small", "--events", "5000000",
                             "--out", str(tmp_path / "t.parquet")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for_staging(tmp_path, proc, ".t.parquet.")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


def test_version_names_the_commit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("txnbench 0.") and "git " in out


def test_manifest_records_the_run_identity(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay(capsys, trace, tmp_path / "res")[0] == 0
    ident = json.loads((tmp_path / "res" / "manifest.json").read_text())["identity"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert ident["git"]["sha"] == head and isinstance(ident["git"]["dirty"], bool)
    assert ident["host"]["cpus"] == os.cpu_count() and ident["argv"]


def test_a_read_only_file_system_is_one_line(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    def read_only(*args: object, **kwargs: object) -> str:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path))

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    code, _, err = replay(capsys, trace, tmp_path / "res")
    assert code == 2 and "Read-only file system" in err
    one_line(err)
    assert not (tmp_path / "res").exists()
