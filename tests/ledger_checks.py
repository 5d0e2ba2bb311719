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
    meta = read_json(run_dir / "run.json")
    results = meta["results"]
    assert_verdict_follows_the_ledger(meta)
    assert results["planned_operations"] == (_i(total["planned"]) if total["planned"] != "" else None)
    assert results["operations"] == _i(total["count"])
    assert results["not_sent"] == _i(total["not_sent"])
    out = {k: (_i(v) if k in ("planned", "count", "ok", "failures", "dropped", "unknown", "not_sent", "over_plan",
                              *FAILED, *NOT_SENT) else v) for k, v in total.items()}
    out.setdefault("unknown", 0)
    return out


def assert_verdict_follows_the_ledger(meta: dict) -> None:
    """The verdict's first words and the exit code agree with the ledger of run.json, in every run a test reads.

    OK (exit 0) only of a whole ledger: operations sent and every one ok, nothing dropped, unknown or not sent,
    no worker lost, planned known under a plan (and equal to what was sent), every check passed; DELIVERED WITH
    FAILURES (exit 0) the same but for failures; exit 0 reads one of the two (tests/test_verdict.py: the rules).
    """
    results, code = meta["results"], meta.get("exit_code")
    verdict = results.get("verdict") or ""
    whole = (results["operations"] > 0 and results["dropped"] == 0 and results.get("unknown", 0) == 0
             and results["not_sent"] == 0 and results.get("over_plan", 0) == 0 and not results.get("lost_workers")
             and all(c["passed"] for c in results.get("checks", [])))
    if meta.get("plan") is not None:
        whole = whole and results["planned_operations"] is not None \
            and results["planned_operations"] == results["operations"]
    if verdict.startswith("OK"):
        assert code == 0 and whole and results["failures"] == 0, (verdict, code, results)
        assert meta.get("plan") is not None or "closed model" in verdict, verdict
    if verdict.startswith("DELIVERED WITH FAILURES"):
        assert code == 0 and whole and results["failures"] > 0, (verdict, code, results)
    if code == 0:
        assert verdict.startswith(("OK", "DELIVERED WITH FAILURES")), (verdict, results)


def timeline_seconds(run_dir: Path) -> list[str]:
    """The seconds of timeline.csv's ALL rows, in order."""
    return [r["time_utc"] for r in read_csv(run_dir / "timeline.csv") if r["operation"] == "ALL"]
