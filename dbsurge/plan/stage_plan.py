"""Stage plans: arrival rates over time, as data.

A plan is a baseline rate and a list of stages, each a duration and a rate that is either a
percentage of the baseline or an absolute number of transactions per second, optionally a
linear ramp between two rates. The text form is what the command line takes::

    >>> plan = StagePlan.parse("2m@20%,1m@200%,2m@100%,1m@5%", baseline_tps=1000)
    >>> [(s.name, s.duration_s, s.start_tps) for s in plan.stages]
    [('20%', 120.0, 200.0), ('200%', 60.0, 2000.0), ('100%', 120.0, 1000.0), ('5%', 60.0, 50.0)]
    >>> plan.cumulative(121.0)   # arrivals due in the first 121 s: 120 s x 200 + 1 s x 2000
    26000.0
    >>> str(StagePlan.parse("30s@500tps,30s@ramp(500tps..2000tps)"))
    '30s@500tps,30s@ramp(500tps..2000tps)'

The plan is pure: it knows nothing of clocks. `Schedule` (below) turns it into absolute
segments and supports live rate changes; the pacer maps arrival numbers to times with
`Schedule.time_of`.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field

from dbsurge.base.errors import PlanError, clip

# Digits are ASCII [0-9], never \d: Python's \d and float() also read Arabic-Indic or fullwidth
# digits, which a user did not mean as a number on a command line.
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_BARE_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_RATE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(%|tps)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

#: The longest duration dbsurge takes (a year): beyond it no test ends, and timers overflow.
MAX_DURATION_S = 365 * 86400.0
#: The highest rate a plan (a stage, --rate, --baseline-tps, a live change) may ask for: 10 million TPS, some
#: 600 times what one generator process sends (16,000 TPS, bench/findings.md) and 50 times 200 of them. A
#: billion TPS used to pass: no fleet sends it, and the ledger then counted the billions of slots nobody
#: sent, one by one, long after the plan's end. The plan's arrivals are bounded too (`size_limits.MAX_ARRIVALS`).
MAX_TPS = 1e7

#: Study 001's spike: 20% -> 200% -> 100% -> 5% of a 1,000 TPS baseline, 2/1/2/1 minutes.
SPIKE_PLAN = "2m@20%,1m@200%,2m@100%,1m@5%"
SPIKE_BASELINE_TPS = 1000.0


def parse_duration(text: str) -> float:
    """Parse ``90s``, ``2m``, ``1.5h``, ``250ms`` or a bare number of seconds into seconds.

    Raises `PlanError` for anything else, a negative or non-finite value (nan, inf, 1e400) and
    durations longer than `MAX_DURATION_S`. This is dbsurge's one duration grammar: the command line's
    durations, a plan's stages, the scenarios' options and the target options' durations all read it.
    """
    value, problem = read_duration(text)
    if problem:
        raise PlanError(f"bad duration '{clip(str(text).strip())}': {problem}")
    return value


def read_duration(text: str) -> tuple[float, str]:
    """(seconds, "") or (0, what is wrong), for a caller that words its own error (`parse_duration`'s grammar)."""
    text = str(text).strip()
    if _BARE_NUMBER.fullmatch(text):
        value = float(text)
    else:
        m = _DURATION.fullmatch(text)
        if not m:
            return 0.0, "expected e.g. 30s, 2m, 1h or 250ms"
        value = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    if value < 0:
        return 0.0, "must not be negative"
    if not value <= MAX_DURATION_S:  # also inf, from 1e400 or a 400-digit number
        return 0.0, f"longer than a year (at most {format_duration(MAX_DURATION_S)})"
    return value, ""


def format_duration(seconds: float) -> str:
    """The shortest exact text for a duration: 120 -> '2m', 90 -> '90s', 0.25 -> '250ms'."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    ms = seconds * 1000
    if abs(ms - round(ms)) < 1e-9:
        return f"{int(round(ms))}ms"
    return f"{seconds:g}s"


def _format_number(x: float) -> str:
    return f"{int(x)}" if x == int(x) else f"{x:g}"


def _ramp_ends(text: str) -> tuple[str, str] | None:
    """``ramp(A..B)`` -> (A, B); None for any other text. Plain string work: no regex backtracking on huge input."""
    if not (text.startswith("ramp(") and text.endswith(")")):
        return None
    inner = text[5:-1]
    a, sep, b = inner.rpartition("..")
    return (a, b) if sep and a and b else None


@dataclass(frozen=True)
class Rate:
    """A rate as written: ``20%`` of the baseline or ``500tps``."""

    value: float
    unit: str  # "%" or "tps"

    @classmethod
    def parse(cls, text: str, *, where: str) -> Rate:
        m = _RATE.fullmatch(text.strip())
        if not m:
            raise PlanError(f"bad rate '{clip(text)}' in stage '{clip(where)}': expected e.g. 20% or 500tps")
        value = float(m.group(1))
        if not math.isfinite(value):  # a 400-digit number reads as inf
            raise PlanError(f"bad rate '{clip(text)}' in stage '{clip(where)}': too large, "
                            f"at most {MAX_TPS:,.0f} TPS")
        return cls(value, m.group(2))

    def tps(self, baseline_tps: float | None, *, where: str) -> float:
        if self.unit == "tps":
            tps = self.value
        elif baseline_tps is None:
            raise PlanError(
                f"stage '{clip(where)}' gives a percentage but no baseline rate was set (use --baseline-tps)")
        else:
            tps = baseline_tps * self.value / 100.0
        if not tps <= MAX_TPS:  # a 400-digit rate reads as inf
            raise PlanError(f"bad rate '{clip(self)}' in stage '{clip(where)}': too large, "
                            f"at most {MAX_TPS:,.0f} TPS")
        return tps

    def __str__(self) -> str:
        return f"{_format_number(self.value)}{self.unit}"


@dataclass(frozen=True)
class Stage:
    """One stage: a name, a duration and a rate that may ramp linearly from start to end."""

    name: str
    duration_s: float
    start_tps: float
    end_tps: float
    text: str  # the stage as the user wrote it, normalised

    @property
    def is_ramp(self) -> bool:
        return self.start_tps != self.end_tps

    @property
    def mean_tps(self) -> float:
        return (self.start_tps + self.end_tps) / 2.0

    @property
    def arrivals(self) -> float:
        return self.mean_tps * self.duration_s


@dataclass(frozen=True)
class StagePlan:
    """A baseline rate and its stages. See the module docstring for the text form."""

    stages: tuple[Stage, ...]
    baseline_tps: float | None = None
    starts: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.stages:
            raise PlanError("empty stage plan: give at least one stage such as 30s@100tps")
        starts, t = [], 0.0
        for s in self.stages:
            starts.append(t)
            t += s.duration_s
        object.__setattr__(self, "starts", tuple(starts))

    @classmethod
    def parse(cls, text: str, baseline_tps: float | None = None) -> StagePlan:
        """Parse ``DURATION@RATE[,DURATION@RATE...]`` where RATE is ``N%``, ``Ntps`` or ``ramp(A..B)``."""
        if baseline_tps is not None and not (0 < baseline_tps <= MAX_TPS):
            raise PlanError(f"bad baseline rate {baseline_tps}: must be a positive number of TPS, "
                            f"at most {MAX_TPS:,.0f}")
        stages = []
        for part in (p.strip() for p in str(text).split(",")):
            if not part:
                raise PlanError(f"empty stage in plan '{clip(text)}': remove the extra comma")
            if "@" not in part:
                raise PlanError(f"bad stage '{clip(part)}': expected DURATION@RATE, e.g. 2m@20% or 30s@500tps")
            dur_text, rate_text = (x.strip() for x in part.split("@", 1))
            duration, problem = read_duration(dur_text)
            if problem:
                raise PlanError(f"bad duration '{clip(dur_text)}' in stage '{clip(part)}': {problem}")
            if duration <= 0:
                raise PlanError(f"stage '{clip(part)}' has no duration: give e.g. 30s")
            ramp = _ramp_ends(rate_text)
            if ramp:
                a = Rate.parse(ramp[0], where=part)
                b = Rate.parse(ramp[1], where=part)
                start, end = a.tps(baseline_tps, where=part), b.tps(baseline_tps, where=part)
                name, norm_rate = f"{a}..{b}", f"ramp({a}..{b})"
            else:
                r = Rate.parse(rate_text, where=part)
                start = end = r.tps(baseline_tps, where=part)
                name, norm_rate = str(r), str(r)
            stages.append(Stage(name, duration, start, end, f"{format_duration(duration)}@{norm_rate}"))
        # Stage names must be unique (they key stages.csv): repeat names get a suffix.
        seen: dict[str, int] = {}
        named = []
        for s in stages:
            n = seen.get(s.name, 0) + 1
            seen[s.name] = n
            named.append(s if n == 1 else Stage(f"{s.name}#{n}", s.duration_s, s.start_tps, s.end_tps, s.text))
        return cls(tuple(named), baseline_tps)

    @classmethod
    def constant(cls, rate_tps: float, duration_s: float = math.inf, name: str | None = None) -> StagePlan:
        """One stage at a fixed rate; an infinite duration runs until stopped."""
        if not (rate_tps >= 0 and math.isfinite(rate_tps)):
            raise PlanError(f"bad rate {rate_tps}: must be a non-negative number of TPS")
        if duration_s <= 0:
            raise PlanError("a constant-rate plan needs a positive duration")
        text = f"{format_duration(duration_s)}@{_format_number(rate_tps)}tps" if math.isfinite(duration_s) else ""
        label = name or f"{_format_number(rate_tps)}tps"
        return cls((Stage(label, duration_s, rate_tps, rate_tps, text or f"@{label}"),), None)

    def __str__(self) -> str:
        return ",".join(s.text for s in self.stages)

    @property
    def duration(self) -> float:
        return self.starts[-1] + self.stages[-1].duration_s

    def stage_index_at(self, t: float) -> int:
        """Index of the stage that contains time t (seconds since start); the last one past the end."""
        if t < 0:
            return 0
        return max(0, bisect_right(self.starts, t) - 1)

    def rate_at(self, t: float) -> float:
        """The planned arrival rate (TPS) at t seconds since the start; 0 outside the plan."""
        if t < 0 or t >= self.duration:
            return 0.0
        i = self.stage_index_at(t)
        s = self.stages[i]
        if not s.is_ramp:
            return s.start_tps
        return s.start_tps + (s.end_tps - s.start_tps) * (t - self.starts[i]) / s.duration_s

    def cumulative(self, t: float) -> float:
        """Arrivals due in [0, t): the integral of the rate."""
        return Schedule.from_plan(self).cumulative(t)

    def to_dict(self) -> dict:
        return {
            "text": str(self),
            "baseline_tps": self.baseline_tps,
            "duration_s": self.duration if math.isfinite(self.duration) else None,
            "stages": [
                {
                    "name": s.name,
                    "start_s": st,
                    "duration_s": s.duration_s if math.isfinite(s.duration_s) else None,
                    "start_tps": s.start_tps,
                    "end_tps": s.end_tps,
                    "target_tps": s.mean_tps,
                }
                for s, st in zip(self.stages, self.starts)
            ],
        }

    @classmethod
    def from_dict(cls, d: dict) -> StagePlan:
        stages = tuple(
            Stage(
                s["name"],
                s["duration_s"] if s["duration_s"] is not None else math.inf,
                s["start_tps"],
                s["end_tps"],
                "",
            )
            for s in d["stages"]
        )
        plan = cls(stages, d.get("baseline_tps"))
        # keep the original text for printing
        texts = d.get("text", "").split(",") if d.get("text") else []
        if len(texts) == len(stages):
            stages = tuple(Stage(s.name, s.duration_s, s.start_tps, s.end_tps, t) for s, t in zip(stages, texts))
            plan = cls(stages, d.get("baseline_tps"))
        return plan


@dataclass(frozen=True)
class Segment:
    """A piece of the schedule with a linear rate, in seconds since the run's start."""

    start_s: float
    end_s: float
    start_tps: float
    end_tps: float
    stage: int
    arrivals_before: float  # cumulative arrivals at start_s

    def arrivals_until(self, t: float) -> float:
        dt = min(t, self.end_s) - self.start_s
        if dt <= 0:
            return 0.0
        slope = 0.0 if self.end_s == math.inf else (self.end_tps - self.start_tps) / (self.end_s - self.start_s)
        return self.start_tps * dt + 0.5 * slope * dt * dt

    def time_of(self, n: float) -> float:
        """The time at which the cumulative count reaches n (n within this segment)."""
        k = n - self.arrivals_before
        a = self.start_tps
        slope = 0.0 if self.end_s == math.inf else (self.end_tps - self.start_tps) / (self.end_s - self.start_s)
        if slope == 0.0:
            return self.start_s + (k / a if a > 0 else math.inf)
        if k <= 0:  # the segment's first arrival (0/0 below when a ramp starts from 0 TPS)
            return self.start_s
        # solve a*dt + slope/2*dt^2 = k for the positive root, in a form stable for small slopes
        disc = a * a + 2.0 * slope * k
        return self.start_s + 2.0 * k / (a + math.sqrt(max(disc, 0.0)))


class Schedule:
    """A plan laid out as segments, with live rate changes.

    A live change at time ``at_s`` keeps everything before it and replaces what follows: either
    the plan scaled by a factor (``scale``) or one absolute rate (``rate_tps``) until the plan's
    end (or forever for an open-ended plan). Because the count of arrivals before ``at_s`` does
    not change, every worker that applies the same change at the same ``at_s`` keeps taking the
    same global slots.
    """

    def __init__(self, segments: list[Segment], plan: StagePlan):
        self.segments = segments
        self.plan = plan
        self._ends = [s.end_s for s in segments]
        self._stage_starts: list[float] | None = None
        # the pacer asks for the next arrival's time and stage once per operation, and arrivals come in
        # order: the last answer's segment (positions [lo, hi)) and stage span are kept, and a position
        # inside them is answered without a search (a schedule never changes: a live change is a new one)
        self._last_segment: tuple[float, float, Segment] | None = None
        self._last_stage: tuple[float, float, int] | None = None

    @classmethod
    def from_plan(cls, plan: StagePlan, scale: float = 1.0) -> Schedule:
        segs, n = [], 0.0
        for i, (s, st) in enumerate(zip(plan.stages, plan.starts)):
            seg = Segment(st, st + s.duration_s, s.start_tps * scale, s.end_tps * scale, i, n)
            segs.append(seg)
            n += seg.arrivals_until(seg.end_s) if math.isfinite(seg.end_s) else 0.0
        return cls(segs, plan)

    @property
    def end_s(self) -> float:
        return self.segments[-1].end_s

    def _segment_at(self, t: float) -> Segment:
        i = bisect_right(self._ends, t)
        return self.segments[min(i, len(self.segments) - 1)]

    def rate_at(self, t: float) -> float:
        if t < 0 or t >= self.end_s:
            return 0.0
        seg = self._segment_at(t)
        if seg.end_s == math.inf or seg.start_tps == seg.end_tps:
            return seg.start_tps
        return seg.start_tps + (seg.end_tps - seg.start_tps) * (t - seg.start_s) / (seg.end_s - seg.start_s)

    def cumulative(self, t: float) -> float:
        if t <= 0:
            return 0.0
        seg = self._segment_at(min(t, self.end_s))
        if t >= self.end_s and math.isfinite(self.end_s):
            return seg.arrivals_before + seg.arrivals_until(seg.end_s)
        return seg.arrivals_before + seg.arrivals_until(t)

    def total(self) -> float:
        return self.cumulative(self.end_s) if math.isfinite(self.end_s) else math.inf

    def time_of(self, n: float) -> float:
        """When the n-th arrival (counting from 0) is due; inf when the plan ends before it."""
        last = self._last_segment
        if last is not None and last[0] <= n < last[1]:
            seg = last[2]
            t = seg.time_of(n)
            return t if t < seg.end_s else math.inf
        # binary search over segments by arrivals_before
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.segments[mid].arrivals_before <= n:
                lo = mid
            else:
                hi = mid - 1
        # skip segments that deliver no arrivals (rate 0) forward
        for seg in self.segments[lo:]:
            finite = math.isfinite(seg.end_s)
            if finite and seg.arrivals_before + seg.arrivals_until(seg.end_s) <= n:
                continue
            # every position in [arrivals_before, its last) would come to this segment by the search above
            self._last_segment = (seg.arrivals_before,
                                  seg.arrivals_before + seg.arrivals_until(seg.end_s) if finite else math.inf, seg)
            t = seg.time_of(n)
            return t if t < seg.end_s else math.inf
        return math.inf

    def stage_at(self, t: float) -> int:
        return self.plan.stage_index_at(t)

    def stage_starts(self) -> list[float]:
        """Position (on the cumulative-arrivals axis) where each stage begins, plus the plan's total.

        Arrival position ``e`` belongs to the last stage whose start is ``<= e`` (`stage_of`): the
        one rule by which workers label their slots and the master counts what each stage planned.
        """
        starts: dict[int, float] = {}
        for seg in self.segments:
            starts.setdefault(seg.stage, seg.arrivals_before)
        n = len(self.plan.stages)
        out, last = [], 0.0
        for i in range(n):
            last = starts.get(i, last)
            out.append(last)
        out.append(self.total())
        return out

    def stage_of(self, position: float) -> int:
        """The stage of the arrival at ``position`` (see `stage_starts`)."""
        last = self._last_stage
        if last is not None and last[0] <= position < last[1]:
            return last[2]
        starts = self._stage_starts
        if starts is None:
            starts = self._stage_starts = self.stage_starts()
        i = bisect_right(starts, position) - 1
        if 0 <= i <= len(starts) - 2:  # starts[i] <= position < starts[i + 1]: stage i
            self._last_stage = (starts[i], starts[i + 1], i)
        return max(0, min(i, len(starts) - 2))

    def changed(self, at_s: float, *, rate_tps: float | None = None, scale: float | None = None) -> Schedule:  # noqa: C901 - the two kinds of change share the segment walk
        """A new schedule: this one up to ``at_s``, then a fixed rate or this plan scaled by a factor."""
        if (rate_tps is None) == (scale is None):
            raise PlanError("a rate change needs exactly one of an absolute rate or a scale factor")
        if rate_tps is not None and not (rate_tps >= 0 and math.isfinite(rate_tps)):
            raise PlanError(f"bad rate {rate_tps}: must be a non-negative number of TPS")
        if scale is not None and not (scale >= 0 and math.isfinite(scale)):
            raise PlanError(f"bad scale {scale}: must be a non-negative number")
        at_s = max(at_s, 0.0)
        kept: list[Segment] = []
        for seg in self.segments:
            if seg.end_s <= at_s:
                kept.append(seg)
            elif seg.start_s < at_s:
                r_at = self.rate_at(at_s) if seg.start_tps != seg.end_tps else seg.start_tps
                kept.append(Segment(seg.start_s, at_s, seg.start_tps, r_at, seg.stage, seg.arrivals_before))
        n = self.cumulative(at_s)
        new: list[Segment] = []
        base = Schedule.from_plan(self.plan)
        if rate_tps is not None:
            # one absolute rate until the end of the plan, cut at the plan's stage boundaries so that
            # each piece keeps its stage index
            for seg in base.segments:
                if seg.end_s <= at_s:
                    continue
                s0 = max(seg.start_s, at_s)
                piece = Segment(s0, seg.end_s, rate_tps, rate_tps, seg.stage, n)
                new.append(piece)
                n += piece.arrivals_until(piece.end_s) if math.isfinite(piece.end_s) else 0.0
        else:
            for seg in base.segments:
                if seg.end_s <= at_s:
                    continue
                s0 = max(seg.start_s, at_s)
                r0 = base.rate_at(s0) if seg.start_tps != seg.end_tps else seg.start_tps
                piece = Segment(s0, seg.end_s, r0 * scale, seg.end_tps * scale, seg.stage, n)
                new.append(piece)
                n += piece.arrivals_until(piece.end_s) if math.isfinite(piece.end_s) else 0.0
        return Schedule(kept + new, self.plan)
