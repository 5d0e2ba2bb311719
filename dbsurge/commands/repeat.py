"""``dbsurge run ... --repeat N``: N runs of the same command in one parent directory, and their spread.

The repetitions go to ``<results>/<run-id>/1``, ``/2``, ... (each an ordinary run directory,
with the same seed: the same planned arrivals and key choices each time); the parent directory
gets a ``run.json`` of kind ``repetitions`` (the command, each repetition's directory and exit
code) and ``repetitions.csv``: per stage, operation and figure, the median, minimum and maximum
across the repetitions, which is printed at the end. An embedded target is started once for all
repetitions. The exit code is the worst of the repetitions' (0 < 1 < 3 < 2; a repetition stopped
by SIGINT or SIGTERM ends the series with 130 or 143), so a pipeline sees any failed repetition.
`dbsurge compare` reads a parent directory as one run whose figures have a spread, and says
whether a difference between two systems is larger than that spread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dbsurge.base.errors import UserError
from dbsurge.config.options import NO_TARGET
from dbsurge.embedded.servers import resolve_embedded
from dbsurge.engine.run_command import take_option
from dbsurge.engine.validate import check_results_dir, results_dir_option, validate_run_id
from dbsurge.rundir import RunDirectory, new_run_id, utc_iso, writer
from dbsurge.rundir.reader import read_meta
from dbsurge.rundir.schema import REPETITION_COLUMNS, REPETITIONS, RUN_JSON
from dbsurge.rundir.summaries import FIGURES, stage_values

COLUMNS = REPETITION_COLUMNS
_RANK = {0: 0, 1: 1, 3: 2, 2: 3}
MAX_REPEAT = 1000


def worst_exit(codes: Sequence[int]) -> int:
    """The worst of the repetitions' exit codes: interrupted first, then 2 > 3 > 1 > 0 (unknown codes: 3)."""
    for code in codes:
        if code in (130, 143):
            return code
    if not codes:
        return 0
    return max(codes, key=lambda c: _RANK.get(c, 2))


def parse_repeat(text: str | None) -> int:
    if text is None or not text.strip().isdigit() or not 1 <= int(text) <= MAX_REPEAT:
        raise UserError(f"--repeat '{text}': expected a whole number of runs from 1 to {MAX_REPEAT}")
    return int(text)


@dataclass(frozen=True)
class RunCommand:
    """What `repeat_main` needs of ``dbsurge run``, handed in by it (the command imports this module, not the
    other way): its parser, the Locust namespace of the rest of a command line, its plan check, and itself."""

    parser: Callable[[], argparse.ArgumentParser]
    locust_namespace: Callable[[list[str]], argparse.Namespace]
    check_plan: Callable[[argparse.Namespace, argparse.Namespace], None]
    main: Callable[[list[str]], int]


def repeat_main(argv: list[str], run: RunCommand) -> int:
    """``dbsurge run ... --repeat N``: N runs of ``run.main`` in one parent directory."""
    text, argv = take_option(list(argv), "--repeat")
    count = parse_repeat(text)
    run_id, argv = take_option(argv, "--run-id")
    results_dir, argv = take_option(argv, "--results-dir")
    args, rest = run.parser().parse_known_args(argv)
    ns = run.locust_namespace(rest)  # what each run reads from the environment and config files too
    run.check_plan(argparse.Namespace(**{**vars(args), "shape": args.shape or os.environ.get("DBSURGE_SHAPE")}), ns)
    results_dir = results_dir_option(results_dir if results_dir is not None else getattr(ns, "results_dir", None))
    args.target = args.target or ns.target
    if not args.target:
        raise UserError(f"{NO_TARGET} or put `target = URI` in a config file")
    validate_run_id(run_id, results_dir)  # "" is refused, not replaced
    run_id = run_id or new_run_id(f"{args.workload}-x{count}")
    validate_run_id(run_id, results_dir)
    check_results_dir(results_dir)
    _, argv = take_option(argv, "--target")
    uri, handle = resolve_embedded(args.target)
    parent = RunDirectory(results_dir, run_id)
    runs: list[dict] = []
    codes: list[int] = []
    try:
        parent.write_meta(run_id=run_id, kind="repetitions", started_utc=utc_iso(time.time()), ended_utc=None,
                          command=["dbsurge", "run", *argv, "--target", args.target, "--repeat", str(count)],
                          target_display=None, repetitions={"count": count, "runs": runs})
        for i in range(1, count + 1):
            print(f"dbsurge: repetition {i} of {count} -> {parent.path / str(i)}", flush=True)
            try:
                code = run.main([*argv, "--target", uri, "--results-dir", str(parent.path), "--run-id", str(i)])
            except UserError as e:
                if i == 1:
                    raise
                sys.stderr.write(f"dbsurge: repetition {i}: {e}\n")
                code = e.exit_code
            codes.append(code)
            runs.append({"index": i, "run_dir": str(i), "exit_code": code})
            sub = parent.path / str(i)
            if i == 1 and (sub / RUN_JSON).is_file():
                parent.write_meta(target_display=read_meta(sub).get("target_display"))
            parent.write_meta(repetitions={"count": count, "runs": runs})
            if code in (2, 130, 143):
                break
        worst = worst_exit(codes)
        parent.write_meta(ended_utc=utc_iso(time.time()), exit_code=worst)
    finally:
        parent.close()
        if handle is not None:
            handle.stop()
    dirs = [parent.path / r["run_dir"] for r in runs]
    rows = spread_rows(dirs)
    write_csv(parent.path / REPETITIONS, rows)
    print("\n" + spread_text(rows, codes, parent.path), flush=True)
    return worst


# -- the spread table (pure, from the repetitions' stages.csv) ---------------------------------------------


def spread_rows(run_dirs: Sequence[Path]) -> list[dict]:
    """repetitions.csv: per stage, operation and figure, the median, min, max and spread across the runs."""
    order, values = stage_values(run_dirs)
    rows = []
    for stage, op in order:
        for fig in FIGURES:
            vs = values.get((stage, op, fig))
            if not vs:
                continue
            med = statistics.median(vs)
            spread = (max(vs) - min(vs)) / med * 100 if med else None
            rows.append({"stage": stage, "operation": op, "figure": fig, "n": len(vs), "median": round(med, 6),
                         "min": min(vs), "max": max(vs), "spread_pct": None if spread is None else round(spread, 3),
                         "values": ";".join(f"{v:g}" for v in vs)})
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    """repetitions.csv, atomically (through the run directory's writer)."""
    writer.write_csv(path, COLUMNS, [{k: "" if v is None else v for k, v in r.items()} for r in rows])


_SHOWN = (("ALL", "achieved_tps", "successful TPS"), ("ALL", "failure_rate", "failure rate"),
          ("*", "p95_ms", "p95 ms"), ("*", "p99_ms", "p99 ms"), ("ALL", "lag_p99_ms", "lag p99 ms"),
          ("ALL", "dropped", "dropped"))


def _fmt(fig: str, v: float | None) -> str:
    if v is None:
        return "-"
    if fig == "failure_rate":
        return f"{v * 100:.3f}%"
    if fig.endswith("_ms"):
        return f"{v:.3f}"
    return f"{v:,.1f}" if fig.endswith("tps") else f"{v:,.0f}"


def spread_text(rows: list[dict], codes: Sequence[int], parent: Path) -> str:
    """The printed table: each stage's figures across the repetitions (median, min, max, spread)."""
    from dbsurge.measure.tables import render

    by = {(r["stage"], r["operation"], r["figure"]): r for r in rows}
    stages = list(dict.fromkeys(r["stage"] for r in rows))
    ops = [op for op in dict.fromkeys(r["operation"] for r in rows) if op != "ALL"]
    out = []
    for stage in stages:
        for op_sel, fig, label in _SHOWN:
            for op in (ops if op_sel == "*" else [op_sel]):
                r = by.get((stage, op, fig))
                if r is None:
                    continue
                name = f"{op} {label}" if op_sel == "*" else label
                spread = "-" if r["spread_pct"] in (None, "") else f"{float(r['spread_pct']):.1f}%"
                out.append([stage, name, _fmt(fig, r["median"]), _fmt(fig, r["min"]), _fmt(fig, r["max"]), spread])
    title = f"Repetitions ({len(codes)} runs; exit codes {', '.join(str(c) for c in codes)})"
    table = render(["stage", "figure", "median", "min", "max", "spread (max-min)/median"], out, title)
    return table + f"\n\nworst exit code {worst_exit(codes)}; {REPETITIONS} and the runs 1..{len(codes)} in {parent}"
