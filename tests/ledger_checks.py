"""Assertions on a run directory's ledger, shared by the fault-injection tests."""

from __future__ import annotations

from pathlib import Path

from runs import read_csv, read_json

FAILED = ["failed_connect", "failed_timeout", "failed_disconnect", "failed_server", "failed_occ", "failed_throttled",
          "failed_other"]
NOT_SENT = ["not_sent_worker_lost", "not_sent_no_connect", "not_sent_interrupted", "not_sent_in_flight",
            "not_sent_users_exhausted", "not_sent_target_silent", "not_sent_unaccounted"]


def _i(v) -> int:
    return int(float(v)) if v not in ("", None) else 0


def assert_row_balances(r: dict) -> None:
    where = f"{r['stage'] or 'run'}/{r['operation']}"
    assert _i(r["count"]) == _i(r["ok"]) + _i(r["failures"]), where
    assert _i(r["failures"]) == sum(_i(r.get(c)) for c in FAILED), where  # older directories lack newer kinds
    assert _i(r["not_sent"]) == sum(_i(r.get(c)) for c in NOT_SENT), where  # and newer reasons
    if r["planned"] != "":
        assert _i(r["planned"]) == (_i(r["count"]) + _i(r["dropped"]) + _i(r.get("unknown")) + _i(r["not_sent"])
                                    - _i(r["over_plan"])), \
            f"{where}: {r}"


def ledger(run_dir: Path) -> dict:
    """Check that stages.csv, summary.csv and run.json balance and agree; return the run's ALL row."""
    stages = read_csv(run_dir / "stages.csv")
    summary = read_csv(run_dir / "summary.csv")
    for r in stages + summary:
        assert_row_balances(r)
    total = next(r for r in summary if r["operation"] == "ALL")
    stage_all = [r for r in stages if r["operation"] == "ALL"]
    for col in ["planned", "count", "ok", "failures", "dropped", "unknown", "not_sent", *FAILED, *NOT_SENT]:
        assert sum(_i(r.get(col)) for r in stage_all) == _i(total.get(col)), col
        per_op = [r for r in summary if r["operation"] != "ALL"]
        assert sum(_i(r.get(col)) for r in per_op) == _i(total.get(col)), col
    results = read_json(run_dir / "run.json")["results"]
    assert results["planned_operations"] == (_i(total["planned"]) if total["planned"] != "" else None)
    assert results["operations"] == _i(total["count"])
    assert results["not_sent"] == _i(total["not_sent"])
    out = {k: (_i(v) if k in ("planned", "count", "ok", "failures", "dropped", "unknown", "not_sent", "over_plan",
                              *FAILED, *NOT_SENT) else v) for k, v in total.items()}
    out.setdefault("unknown", 0)
    return out


def timeline_seconds(run_dir: Path) -> list[str]:
    """The seconds of timeline.csv's ALL rows, in order."""
    return [r["time_utc"] for r in read_csv(run_dir / "timeline.csv") if r["operation"] == "ALL"]
