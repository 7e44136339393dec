"""``txnbench campaign``: a short budget checks histories with random seeds in worker processes and
prints histories, faults and violations by kind (the long runs are not part of the test run)."""

from __future__ import annotations

import pytest

from bench.check.campaign import CampaignResult, _kind_of
from bench.cli import main


def test_a_short_campaign_checks_histories_and_reports_them(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["campaign", "--budget-s", "60", "--histories", "30", "--workers", "1", "--steps", "6", "--no-progress"])
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("histories checked: ") and int(first.split()[2].replace(",", "")) >= 30
    assert "faults injected: " in out
    found = int(out.split("violations: ")[1].split()[0].replace(",", ""))
    assert (found, code) == (0, 0), out  # random seeds: any violation is a finding (issue 20)


def test_violations_are_counted_by_kind() -> None:
    r = CampaignResult()
    r.add({"histories": 8, "examples": 1, "faults": {"crash_tc": 2}, "violations": {"aborted-read": 1}, "samples": {}})
    r.add({"histories": 8, "examples": 1, "faults": {"crash_tc": 1}, "violations": {"aborted-read": 2}, "samples": {}})
    text = "\n".join(r.lines())
    assert "histories checked: 16" in text and "crash_tc: 3" in text and "aborted-read: 3" in text
    assert _kind_of(AssertionError("publish x: systems disagree: a=ok, b=TxnConflict")) == "systems-disagree"


def test_bad_budgets_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["campaign", "--workers", "0"], ["campaign", "--budget-s", "nan"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1
