"""Table 1: throughput and client CPU per operation, every client side by side, alternating.

Each repetition runs every client once for the long duration and once for a short one, in
alternating order (forward, then backward), so that drift on a shared machine (another job, a
thermal or frequency change) falls on all clients alike.

Client CPU per operation is taken two ways from the kernel's accounting of each client's whole
process tree (`measure.run_measured`):

- *marginal*: ``(cpu_long - cpu_short) / (ops_long - ops_short)``. Starting Python, importing
  Locust, connecting and writing the results cost the same in both runs and cancel out: this is
  the CPU an additional operation costs, the figure that decides how many clients a load needs.
- *whole run*: ``cpu_long / ops_long``, start-up and results included (a Python client pays a
  second or more of start-up, a C client almost nothing).

Throughput is ``ops_long / long_seconds``. Ratios are taken within a repetition (the runs next to
each other) and then summarised as median, min and max over repetitions.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field

from bench.clients import CLIENTS, Client, Env, new_tag
from bench.measure import run_measured


@dataclass
class Sample:
    """One repetition of one client: the long run and the short run."""

    client: str
    rep: int
    long_s: int
    short_s: int
    ops_long: int
    ops_short: int
    cpu_long: float
    cpu_short: float
    wall_long: float

    @property
    def ops_per_s(self) -> float:
        return self.ops_long / self.long_s

    @property
    def cpu_us_marginal(self) -> float:
        d_ops = self.ops_long - self.ops_short
        return (self.cpu_long - self.cpu_short) / d_ops * 1e6 if d_ops > 0 else math.nan

    @property
    def cpu_us_whole(self) -> float:
        return self.cpu_long / self.ops_long * 1e6 if self.ops_long else math.nan


@dataclass
class Spread:
    """Median, min and max of a few repetitions."""

    median: float
    low: float
    high: float
    values: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        good = [v for v in values if v is not None and not math.isnan(v)]
        if not good:
            return cls(math.nan, math.nan, math.nan, [])
        return cls(statistics.median(good), min(good), max(good), good)


def resolve(key: str, variants: dict[str, str]) -> tuple[Client, str | None]:
    """A client key, possibly ``name@variant``: the client and the PYTHONPATH of the engine variant."""
    name, _, variant = key.partition("@")
    if name not in CLIENTS:
        raise ValueError(f"unknown client {name!r} (known: {', '.join(CLIENTS)})")
    if variant and variant not in variants:
        raise ValueError(f"unknown engine variant {variant!r}")
    return CLIENTS[name], (variants[variant] if variant else None)


def run_client(key: str, env: Env, seconds: int, variants: dict[str, str] | None = None) -> tuple[int, float, float]:
    """Run one client once: (operations, CPU seconds of its process tree, wall seconds)."""
    client, pythonpath = resolve(key, variants or {})
    tag = new_tag(key.replace("@", "-"))
    run_env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else None
    m = run_measured(client.command(env, seconds, tag), cwd=str(env.workdir), env=run_env)
    output = m.stdout + "\n" + m.stderr
    if m.returncode != 0:
        raise RuntimeError(f"{key} exited with {m.returncode}:\n{output[-3000:]}")
    return client.count(env, output, tag), m.cpu_s, m.wall_s


def run_table(env: Env, clients: list[str], *, reps: int, long_s: int, short_s: int,
              variants: dict[str, str] | None = None, log=print) -> list[Sample]:
    samples: list[Sample] = []
    for rep in range(reps):
        order = clients if rep % 2 == 0 else list(reversed(clients))
        for key in order:
            ops_l, cpu_l, wall_l = run_client(key, env, long_s, variants)
            ops_s, cpu_s, _ = run_client(key, env, short_s, variants)
            s = Sample(key, rep, long_s, short_s, ops_l, ops_s, cpu_l, cpu_s, wall_l)
            samples.append(s)
            log(f"  rep {rep + 1}/{reps} {key:20s} {s.ops_per_s:9.0f} ops/s  {s.cpu_us_marginal:7.1f} us/op marginal"
                f"  {s.cpu_us_whole:7.1f} us/op whole run")
    return samples


def by_client(samples: list[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.client, []).append(s)
    return out


def paired_ratio(samples: list[Sample], num: str, den: str, metric: str) -> Spread:
    """``metric(num) / metric(den)`` within each repetition, summarised over repetitions."""
    per_rep: dict[int, dict[str, Sample]] = {}
    for s in samples:
        per_rep.setdefault(s.rep, {})[s.client] = s
    values = []
    for runs in per_rep.values():
        if num in runs and den in runs:
            a, b = getattr(runs[num], metric), getattr(runs[den], metric)
            values.append(a / b if b else math.nan)
    return Spread.of(values)
