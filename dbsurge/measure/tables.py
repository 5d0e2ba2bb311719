"""Plain-text tables for the end of a run, laid out like the studies' tables.

Response time (from the intended start) is the headline; service time sits beside it. Times
print with three decimals in milliseconds (0.412 ms), never rounded to whole milliseconds.
"""

from __future__ import annotations

from dbsurge.measure.aggregator import ALL


def render(headers: list[str], rows: list[list[str]], title: str | None = None) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [title, ""] if title else []
    out += [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(r, widths)))
    return "\n".join(out)


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _numeric(c: str) -> bool:
    return bool(c) and (c[0].isdigit() or c[0] == "-") and c != "-"


def fmt_ms(v) -> str:
    return "-" if v in ("", None) else f"{float(v):.3f}"


def fmt_num(v, digits: int = 1) -> str:
    if v in ("", None):
        return "-"
    f = float(v)
    return f"{f:,.0f}" if digits == 0 else f"{f:,.{digits}f}"


def fmt_rate(v) -> str:
    """A planned rate: whole TPS from 10 on (``245``, not ``244.86`` beside ``20``: a ramp's or an override's
    mean), a small fractional one (2.5 TPS, the 5% of a 50 TPS plan) with its decimals.

        >>> [fmt_rate(x) for x in (20, 244.857, 2.5, 0.25, 1999.96, "")]
        ['20', '245', '2.5', '0.25', '2,000', '-']
    """
    if v in ("", None):
        return "-"
    f = float(v)
    return f"{f:,.0f}" if f == round(f) or abs(f) >= 10 else f"{f:,.2f}".rstrip("0")


def fmt_pct(v) -> str:
    return "-" if v in ("", None) else f"{float(v) * 100:.3f}%"


def operation_table(summary_rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Per operation over the whole run: successes' latency, and failures' beside it."""
    headers = ["operation", "planned", "ok", "failed", "failure rate", "ops/s", "p50 ms", "p95 ms", "p99 ms",
               "p99.9 ms", "max ms", "failed p99 ms", "svc p50 ms", "svc p99 ms", "lag p99 ms"]
    rows = []
    for r in summary_rows:
        ok = _succeeded(r)  # the percentiles are of successes: none succeeded, none to show (not 0.000 ms)

        def shown(column: str, r: dict = r, ok: bool = ok) -> str:
            return fmt_ms(r[column]) if ok else "-"

        rows.append([r["operation"], fmt_num(r.get("planned"), 0), fmt_num(r.get("ok"), 0), fmt_num(r["failures"], 0),
                     fmt_pct(r["failure_rate"]), fmt_num(r["achieved_tps"]), shown("p50_ms"), shown("p95_ms"),
                     shown("p99_ms"), shown("p999_ms"), shown("max_ms"), fmt_ms(r.get("failed_p99_ms")),
                     shown("service_p50_ms"), shown("service_p99_ms"), fmt_ms(r["lag_p99_ms"])])
    return headers, rows


def _succeeded(row: dict) -> bool:
    """Whether any operation of the row succeeded (its response-time percentiles mean something)."""
    try:
        ok = row.get("ok")
        if ok in (None, ""):  # older tables: count less failures
            return float(row.get("count") or 0) - float(row.get("failures") or 0) > 0
        return float(ok) > 0
    except (TypeError, ValueError):
        return True


#: The ledger's columns as the tables show them: failures by family, not sent by reason.
_LEDGER_FAILED = [("connect", "failed_connect"), ("timeout", "failed_timeout"), ("disconnect", "failed_disconnect"),
                  ("server", "failed_server"), ("occ", "failed_occ"), ("throttled", "failed_throttled"),
                  ("other", "failed_other")]
_LEDGER_NOT_SENT = [("worker lost", "not_sent_worker_lost"), ("no connect", "not_sent_no_connect"),
                    ("interrupted", "not_sent_interrupted"), ("in flight", "not_sent_in_flight"),
                    ("users exhausted", "not_sent_users_exhausted"),
                    ("target silent", "not_sent_target_silent"), ("unaccounted", "not_sent_unaccounted")]


def ledger_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The ledger of each ALL row (per stage, or the run): planned = ok + failed + dropped + unknown + not sent.

    Columns that are zero in every row are left out, except the totals; server failures name
    their codes in a last column.
    """
    rows = [r for r in rows if r["operation"] == ALL]
    failed = [(h, c) for h, c in _LEDGER_FAILED if any(int(r.get(c) or 0) for r in rows)]
    not_sent = [(h, c) for h, c in _LEDGER_NOT_SENT if any(int(r.get(c) or 0) for r in rows)]
    unknown = any(int(r.get("unknown") or 0) for r in rows)
    headers = ["stage", "planned", "ok", "failed"] + [f"failed {h}" for h, _ in failed] + ["dropped"]
    headers += ["unknown"] * unknown + ["not sent"]
    headers += [f"not sent: {h}" for h, _ in not_sent] + ["failure codes"]
    out = []
    for r in rows:
        line = [r["stage"] or "run", fmt_num(r.get("planned"), 0), fmt_num(r.get("ok"), 0),
                fmt_num(r.get("failures"), 0)]
        line += [fmt_num(r.get(c), 0) for _, c in failed]
        line += [fmt_num(r.get("dropped"), 0)] + [fmt_num(r.get("unknown"), 0)] * unknown
        line.append(fmt_num(r.get("not_sent"), 0))
        line += [fmt_num(r.get(c), 0) for _, c in not_sent]
        line.append(r.get("failed_detail") or "")
        out.append(line)
    return headers, out


#: A failure's first message as the summary prints it: long enough for the error and the statement's start.
FIRST_MESSAGE_LIMIT = 200


def failure_lines(errors: dict, first_errors: dict) -> list[str]:
    """One line per failure kind, commonest first, with the first message the run saw of it.

    ``server:42P01: 60 failed; first: UndefinedTable: relation "orders" does not exist ...``: the ledger's
    codes alone leave the reason in events.jsonl; pgbench prints the SQL error itself.

        >>> failure_lines({"timeout": 2, "server:42P01": 60}, {"server:42P01": 'UndefinedTable: relation "x"'})
        ['server:42P01: 60 failed; first: UndefinedTable: relation "x"', 'timeout: 2 failed']
    """
    out = []
    for kind, n in sorted(errors.items(), key=lambda item: (-int(item[1]), item[0])):
        if not int(n):
            continue
        first = " ".join(str(first_errors.get(kind) or "").split())
        if len(first) > FIRST_MESSAGE_LIMIT:
            first = first[: FIRST_MESSAGE_LIMIT - 1] + "…"
        out.append(f"{kind}: {int(n):,} failed" + (f"; first: {first}" if first else ""))
    return out


def stage_table(stage_rows: list[dict], capacity: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """One line per stage, as the 001 study's spike table: arrival rate, successful TPS, p95/p99 per
    operation, failure rate, lag and drops; a capacity column when a collector supplied one."""
    ops = sorted({r["operation"] for r in stage_rows if r["operation"] != ALL})
    # successful TPS: completed inside the stage's window, per second (what the database delivered, the
    # studies' figure); "by intended start": the stage's own arrivals that succeeded, late ones included
    headers = ["stage", "arrival rate", "successful TPS", "by intended start"]
    for op in ops:
        headers.append(f"{op} p95/p99 ms")
    headers += ["svc p99 ms", "failure rate", "lag p99 ms", "dropped"]
    if capacity is not None:
        headers.append("capacity (max)")
    rows = []
    by_stage: dict[str, dict[str, dict]] = {}  # in the rows' order; grouped once (plans of thousands of stages)
    for r in stage_rows:
        by_stage.setdefault(r["stage"], {})[r["operation"]] = r
    for st, by_op in by_stage.items():
        total = by_op.get(ALL, {})
        delivered = total.get("delivered_tps")
        row = [st, fmt_rate(total.get("target_tps")),
               fmt_num(delivered if delivered not in (None, "") else total.get("achieved_tps"), 1),
               fmt_num(total.get("achieved_tps"), 1)]
        for op in ops:
            r = by_op.get(op)
            row.append(f"{fmt_ms(r['p95_ms'])} / {fmt_ms(r['p99_ms'])}" if r and _succeeded(r) else "-")
        # a stage nothing ran in (never reached: a Stop, a signal) has no latency, not a latency of 0
        measured = _measured(total)
        row += [fmt_ms(total.get("service_p99_ms")) if _succeeded(total) else "-",
                fmt_pct(total.get("failure_rate")) if measured else "-",
                fmt_ms(total.get("lag_p99_ms")) if measured else "-", fmt_num(total.get("dropped"), 0)]
        if capacity is not None:
            row.append(capacity.get(st, ""))
        rows.append(row)
    return headers, rows


def _measured(row: dict) -> bool:
    """Whether any operation of the row completed (its percentiles mean something)."""
    try:
        return float(row.get("count") or 0) > 0
    except (TypeError, ValueError):
        return True


def _clock(utc: str | None) -> str:
    """``12:00:20Z`` of an ISO UTC time."""
    return utc[11:19] + "Z" if utc else "-"


def segment_table(segment_rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """One line per stage and per rate override in force (`dbsurge.plan.segments`): from when, planned and
    achieved TPS, response and service time, lag, failures and drops."""
    headers = ["segment", "first second", "seconds", "target TPS", "achieved TPS", "p50 ms", "p99 ms", "svc p50 ms",
               "svc p99 ms", "lag p99 ms", "failed", "dropped"]
    rows = [[r["segment"], _clock(r.get("start_utc")),
             fmt_num(r.get("seconds"), 0), fmt_num(r.get("target_tps"), 1), fmt_num(r.get("achieved_tps"), 1),
             fmt_ms(r.get("p50_ms")), fmt_ms(r.get("p99_ms")), fmt_ms(r.get("service_p50_ms")),
             fmt_ms(r.get("service_p99_ms")), fmt_ms(r.get("lag_p99_ms")), fmt_num(r.get("failures"), 0),
             fmt_num(r.get("dropped"), 0)]
            for r in segment_rows]
    return headers, rows
