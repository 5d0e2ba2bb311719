"""What every workload shares: option specs and parsing, the `Workload` base class, load progress.

A workload is data plus operations. `Workload.load()` creates the schema and the rows it needs
(idempotent, deterministic from the ``seed`` option); `Workload.new_client(session, seed)` hands
one simulated user a dict of zero-argument callables, one per operation, each of which runs one
complete operation against that user's session and raises on failure. The engine times the
calls; nothing in here measures operations.
"""

from __future__ import annotations

import difflib
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TextIO

from dbsurge.base.errors import WorkloadError, clip
from dbsurge.config.option_types import NumberError, read_float, read_int
from dbsurge.config.options import parse_key_values
from dbsurge.workloads.stores import store_kinds

_KIND_NAMES = {"postgres": "PostgreSQL", "mongo": "MongoDB", "dynamodb": "DynamoDB-API", "cql": "CQL"}

# Rows per loader transaction: under Aurora DSQL's 3,000-rows-per-transaction limit, and large
# enough that the round trips do not dominate the load.
LOAD_CHUNK = 1000
PROGRESS_INTERVAL_S = 2.0


# ---------------------------------------------------------------------------------------------
# Options: every key next to its default, in one dict per workload (as go-ycsb's prop.go).


@dataclass(frozen=True)
class Option:
    """One workload option: its default, a parser from the string form, and a short description.

    ``parse`` raises `ValueError` with what it expected; `resolve_options` turns that into a
    one-line `WorkloadError` naming the option.
    """

    default: Any
    parse: Callable[[str], Any]
    help: str


#: The largest whole number a workload option takes unless its spec says less: PostgreSQL's bigint (int8),
#: and MongoDB's and the drivers' int64. Beyond it a value reached the database and failed every operation.
INT8_MAX = 2**63 - 1
#: PostgreSQL's integer (int4): a value that lands in such a column is at most this.
INT4_MAX = 2**31 - 1


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """Parser for an integer in ASCII digits, bounded (inclusive): at most `maximum`, else `INT8_MAX`.

    Read by `dbsurge.config.option_types.read_int`, the parser every number option goes through: ``١٠٠`` and
    ``1_0_0`` are refused here as on the command line."""
    low = -INT8_MAX - 1 if minimum is None else minimum
    high = INT8_MAX if maximum is None else maximum

    def parse(text: str) -> int:
        try:
            value = read_int(text)
        except NumberError:
            raise ValueError("expected an integer in ASCII digits") from None
        if value < low:
            raise ValueError(f"expected an integer >= {low}")
        if value > high:
            raise ValueError(f"expected an integer <= {high:,}")
        return value

    return parse


def _number(text: str, expected: str) -> float:
    """`text` as a finite number in ASCII digits (`dbsurge.config.option_types.read_float`), else ValueError(expected)."""
    try:
        return read_float(text)
    except NumberError:
        raise ValueError(f"{expected}, in ASCII digits") from None


def fraction(text: str) -> float:
    """Parser for a number between 0 and 1 inclusive."""
    value = _number(text, "expected a number between 0 and 1")
    if not 0.0 <= value <= 1.0:
        raise ValueError("expected a number between 0 and 1")
    return value


def weight(text: str) -> float:
    """Parser for an operation weight: a finite number >= 0."""
    value = _number(text, "expected a number >= 0")
    if not value >= 0.0:
        raise ValueError("expected a number >= 0")
    return value


def open_unit_interval(text: str) -> float:
    """Parser for a number strictly between 0 and 1 (the zipfian constant)."""
    value = _number(text, "expected a number between 0 and 1 (exclusive)")
    if not 0.0 < value < 1.0:
        raise ValueError("expected a number between 0 and 1 (exclusive)")
    return value


def boolean(text: str) -> bool:
    """Parser for true/false (also yes/no, 1/0, on/off), as YCSB's Boolean.parseBoolean and friends."""
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ValueError("expected true or false")


def choice(*values: str) -> Callable[[str], str]:
    """Parser for one of a fixed set of words (case-insensitive)."""

    def parse(text: str) -> str:
        lowered = text.strip().lower()
        if lowered not in values:
            raise ValueError("expected one of " + "|".join(values))
        return lowered

    return parse


def text(value: str) -> str:
    """Parser for free text."""
    return value


def resolve_options(workload: str, specs: Mapping[str, Option], given: Mapping[str, object]) -> dict[str, Any]:
    """Every option of ``specs`` with its value: the parsed given one, else the default.

    Keys are matched case-insensitively (YCSB property files are lowercase, users type
    ``recordCount``). Raises `WorkloadError` with one line for an unknown key or a bad value.
    """
    values = {key: spec.default for key, spec in specs.items()}
    for raw_key, raw_value in given.items():
        key = str(raw_key).strip().lower()
        spec = specs.get(key)
        if spec is None:
            close = difflib.get_close_matches(key, list(specs), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise WorkloadError(
                f"unknown option '{clip(raw_key)}' for workload {workload}{hint}; known options: {', '.join(specs)}"
            )
        value_text = _option_text(raw_value)
        try:
            values[key] = spec.parse(value_text)
        except ValueError as exc:
            raise WorkloadError(f"bad value for workload option {clip(key)}={clip(value_text)!r}: {exc}") from None
    return values


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def parse_workload_options(pairs: Iterable[str]) -> dict[str, str]:
    """``["recordcount=1000", "readproportion=0.95"]`` -> ``{"recordcount": "1000", ...}``.

    For a repeatable ``--workload-option key=value`` flag; a later pair overrides an earlier one.

        >>> parse_workload_options(["recordcount=1000", "requestdistribution = zipfian"])
        {'recordcount': '1000', 'requestdistribution': 'zipfian'}
    """
    return parse_key_values(pairs, "--workload-option", WorkloadError)


# ---------------------------------------------------------------------------------------------
# The base class.


class Workload:
    """Base class of the workloads: options, default operation weights, load, per-user clients.

    Subclasses set `name`, `OPTIONS` (every option with its default) and implement `has_data`, `load`
    and `new_client`. The target kinds a workload can drive are those it has stores for
    (`dbsurge.workloads.stores`); a workload without stores (one database only) sets `kinds`.
    """

    name: ClassVar[str] = ""
    OPTIONS: ClassVar[dict[str, Option]] = {}
    kinds: ClassVar[tuple[str, ...]] = ("postgres", "mongo")

    def __init__(self, target: Any, options: Mapping[str, object] | None = None) -> None:
        self.target = target
        self.options: dict[str, Any] = self.resolve(options or {})
        #: the options the user gave (lower case), as against the defaults `resolve` filled in
        self.given_options: frozenset[str] = frozenset(str(k).strip().lower() for k in (options or {}))
        kind = getattr(target, "kind", None)
        kinds = store_kinds(self.name) or self.kinds
        if kind not in kinds:
            wanted = " or ".join(_KIND_NAMES.get(k, k) for k in kinds)
            raise WorkloadError(f"workload {self.name} needs a {wanted} target, not {kind}")
        self.kind: str = kind
        self.operations: dict[str, float] = self.default_weights()
        self.last_load_inserted = 0

    @classmethod
    def resolve(cls, given: Mapping[str, object]) -> dict[str, Any]:
        """Every option's value (`resolve_options`), checked together (`check_options`): no target needed, so
        ``dbsurge run`` refuses a bad combination before it starts a server or loads data."""
        values = resolve_options(cls.name, cls.OPTIONS, given)
        cls.check_options(values)
        return values

    @classmethod
    def check_options(cls, values: Mapping[str, Any]) -> None:
        """Refuse (`WorkloadError`, one line) values that are each in range but not together; none by default."""

    def default_weights(self) -> dict[str, float]:
        """Operation name -> relative weight, for the engine's operation mix."""
        raise NotImplementedError

    @classmethod
    def operation_names(cls, values: Mapping[str, Any]) -> list[str]:
        """The operations of this workload with these resolved options (`resolve`), with no target: what
        ``dbsurge run`` checks --operation and --check against before it starts a server.

        `default_weights` reads the options alone; the instance made here has nothing else."""
        probe = cls.__new__(cls)
        probe.options = dict(values)
        return list(probe.default_weights())

    def has_data(self) -> bool:
        """True when `load` has already put this workload's data in the target."""
        raise NotImplementedError

    def check_no_load(self) -> None:
        """Under ``--no-load``, before any load: refuse (`WorkloadError`, one line) a target where no operation could
        run at all, for want of what only the load creates. Nothing by default: the operations' failures say it."""

    def load(self, progress: bool = True) -> int:
        """Create the schema if missing and insert the rows that are missing.

        Returns the number of rows (documents) of the data set now in place; how many this call
        inserted is in `last_load_inserted` (0 when an earlier load was complete).
        """
        raise NotImplementedError

    def new_client(self, session: Any, seed: int) -> dict[str, Callable[[], object]]:
        """Per-user operations: name -> zero-argument callable running one complete operation."""
        raise NotImplementedError

    def _session(self) -> Any:
        return self.target.connect()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.options}>"


def pg_executor(session: Any) -> Callable[..., Any]:
    """``execute(sql, params, prepare=...) -> cursor`` for one autocommit statement on a PostgreSQL session.

    The session's own ``execute`` when it has one (dbsurge's sessions do: it notices a broken
    connection and reconnects before the next operation, which matters after an idle window);
    else ``session.conn.execute``. Bound once per client, so it costs nothing per operation.
    """
    execute = getattr(session, "execute", None)
    if execute is not None:
        return execute

    def conn_execute(sql: Any, params: Any = None, *, prepare: bool | None = None) -> Any:
        return session.conn.execute(sql, params, prepare=prepare)

    return conn_execute


def pg_lookup(session: Any, sql: str, *, prepare_now: bool = True) -> Callable[[Any], Any]:
    """``lookup(params) -> first row or None`` for one read-only statement on a PostgreSQL session.

    The session's fast path (`PostgresSession.lookup`: prepared once, run through libpq; at once
    unless ``prepare_now`` is false) when it has one, else ``execute(sql, params, prepare=True).fetchone()``.
    """
    lookup = getattr(session, "lookup", None)
    if lookup is not None:
        return lookup(sql, prepare_now=prepare_now)
    execute = pg_executor(session)
    return lambda params: execute(sql, params, prepare=True).fetchone()


def spread_sample(start: int, stop: int, samples: int = 16) -> list[int]:
    """Up to ``samples`` indexes spread evenly over ``[start, stop)``, always including the last one.

    Used by ``has_data``: probing a few keys by primary key works on any table size, where
    ``count(*)`` times out on Aurora DSQL for large tables.
    """
    count = stop - start
    if count <= 0:
        return []
    if count <= samples:
        return list(range(start, stop))
    step = count / (samples - 1)
    return sorted({start + min(count - 1, int(i * step)) for i in range(samples)} | {stop - 1})


class LoadProgress:
    """Prints ``loading ycsb: 40000/100000 rows (40%) 12000 rows/s`` to stderr every ~2 s of a load.

    Short loads print nothing; a load that printed at least one line also prints a final one.
    """

    def __init__(
        self,
        label: str,
        total: int,
        *,
        enabled: bool = True,
        interval_s: float = PROGRESS_INTERVAL_S,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.enabled = enabled
        self.interval_s = interval_s
        self.stream = stream
        self.clock = clock
        self.done = 0
        self.started = clock()
        self._next_print = self.started + interval_s
        self._printed = False
        self._printed_done = -1

    def advance(self, rows: int) -> None:
        """Count ``rows`` more rows handled (inserted or found present); maybe print a line."""
        self.done += rows
        if self.enabled and self.clock() >= self._next_print:
            self._print()
            self._next_print = self.clock() + self.interval_s

    def finish(self) -> None:
        """Print the final line if any progress line was printed (and it was not already the final one)."""
        if self.enabled and self._printed and self._printed_done != self.done:
            self._print()

    def _print(self) -> None:
        self._printed_done = self.done
        elapsed = max(self.clock() - self.started, 1e-9)
        percent = 100 * self.done // self.total if self.total else 100
        stream = self.stream or sys.stderr
        print(
            f"loading {self.label}: {self.done}/{self.total} rows ({percent}%) {self.done / elapsed:.0f} rows/s",
            file=stream,
            flush=True,
        )
        self._printed = True
