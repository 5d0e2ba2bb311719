"""The whole test suite, as `make test` runs it: the timing tests alone, then the rest three at a time.

Two parts (tests/conftest.py's SERIAL_MODULES and SERIAL_TESTS say which test is in which):

- the timing tests (``-m serial``) assert achieved rates, latencies against pgbench's, timeouts' elapsed
  times: beside other work on two cores they fail;
- the rest (``-m "not serial"``, three at a time) assert ledgers, files, exit codes and messages, with waits
  several times what their step takes.

Where this process may make a control group that counts CPU (root; cgroup v1 ``cpuacct`` or v2), it
prints after the timing part the CPU each timing test used: the whole part uses about 0.4 of a core.

``--side-by-side`` runs the rest at the same time, inside a group marked ``cpu.idle`` (the scheduler gives
it only the CPU the timing tests leave, and takes it back the moment they wake; ``nice`` could not, since
autogroups give each new session its own share). The timing tests then pass and the whole suite takes
about 16 minutes instead of 25, but where the timing tests hold both CPUs for a second or two, a run of
the rest starves and fails: 2 or 3 in each of three runs, never the same ones (docs/testing.md). It is
for a quick look, not CI.

The timing tests print as they go; with ``--side-by-side`` the rest's output follows theirs. The exit
code is the first part's non-zero code, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TIMING = ["-q", "-ra", "--durations=40", "-m", "serial"]
REST = ["-q", "-ra", "--durations=15", "-m", "not serial", "-n", "3", "--dist", "worksteal"]

#: where a CPU control group can go, newest interface first: (parent, how the group is made idle)
CGROUP_PARENTS = (
    (Path("/sys/fs/cgroup"), "v2"),  # unified hierarchy with the cpu controller enabled below the root
    (Path("/sys/fs/cgroup/unified"), "v2"),
    (Path("/sys/fs/cgroup/cpu"), "v1"),
)


class AccountingGroup:
    """A control group that only counts the CPU its tasks use (cgroup v1 ``cpuacct``, or v2), for the timing part:
    conftest.py books each timing test's CPU seconds from it, and the suite prints the heaviest."""

    PARENTS = (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls) -> AccountingGroup | None:
        for parent in cls.PARENTS:
            if not ((parent / "cpuacct.usage").exists() or (parent / "cgroup.controllers").exists()):
                continue
            path = parent / f"dbsurge-suite-{os.getpid()}-timing"
            try:
                path.mkdir()
            except OSError:
                continue
            if (path / "cpuacct.usage").exists() or (path / "cpu.stat").exists():
                return cls(path)
            with contextlib.suppress(OSError):
                path.rmdir()
        return None

    def enter(self) -> None:
        (self.path / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def remove(self) -> None:
        _empty_and_remove(self.path)


class IdleGroup:
    """A CPU control group whose tasks run only on CPU time nothing else wants (``cpu.idle`` = 1)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls) -> tuple[IdleGroup | None, str]:
        """The group, or None and why not (one line)."""
        reasons = []
        for parent, version in CGROUP_PARENTS:
            if version == "v2" and "cpu" not in _read(parent / "cgroup.subtree_control").split():
                reasons.append(f"{parent}: no cpu controller")
                continue
            if version == "v1" and not (parent / "cpu.shares").exists():
                reasons.append(f"{parent}: not a cpu hierarchy")
                continue
            path = parent / f"dbsurge-suite-{os.getpid()}"
            try:
                path.mkdir()
            except OSError as err:
                reasons.append(f"{parent}: {err.strerror}")
                continue
            try:
                (path / "cpu.idle").write_text("1\n")
            except OSError as err:
                with contextlib.suppress(OSError):
                    path.rmdir()
                reasons.append(f"{path / 'cpu.idle'}: {err.strerror} (Linux 5.15 or later has it)")
                continue
            return cls(path), ""
        return None, "; ".join(reasons)

    def enter(self) -> None:
        """Move the calling process into the group (run in the child, before it executes pytest)."""
        (self.path / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def remove(self) -> None:
        _empty_and_remove(self.path)


def _empty_and_remove(path: Path) -> None:
    """Move what is left in a group (a daemon a test leaked) back to its parent, then remove the group."""
    for _ in range(50):
        for pid in _read(path / "cgroup.procs").split():
            with contextlib.suppress(OSError):
                (path.parent / "cgroup.procs").write_text(f"{pid}\n")
        try:
            path.rmdir()
            return
        except OSError:
            time.sleep(0.1)
    print(f"suite: could not remove {path}", file=sys.stderr)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def pytest(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", *args]


def run_timing(extra: list[str], env: dict[str, str] | None = None) -> int:
    """The timing tests, in a group that counts their CPU when one can be made; then the table of what each used."""
    env = dict(os.environ if env is None else env)
    accounting = AccountingGroup.make()
    cpu_log = Path(tempfile.mkstemp(prefix="dbsurge-suite-cpu-", suffix=".tsv")[1])
    if accounting is not None:
        env.update(DBSURGE_TEST_SUITE_CPU_GROUP=str(accounting.path), DBSURGE_TEST_SUITE_CPU_LOG=str(cpu_log))
    try:
        code = subprocess.call(pytest(TIMING + extra), env=env,
                               preexec_fn=accounting.enter if accounting is not None else None)
        _print_cpu(cpu_log)
        return code
    finally:
        if accounting is not None:
            accounting.remove()
        cpu_log.unlink(missing_ok=True)


def sequential(extra: list[str]) -> int:
    """The timing tests alone, then the rest."""
    timing = run_timing(extra)
    rest = subprocess.call(pytest(REST + extra))
    return timing or rest


def side_by_side(group: IdleGroup, extra: list[str]) -> int:
    with tempfile.NamedTemporaryFile("w+", prefix="dbsurge-suite-rest-", suffix=".log", delete=False) as log:
        rest_done = Path(log.name + ".done")  # the CPU-bound timing tests wait for this file (conftest.py, CPU_BOUND)
        print(f"suite: the timing tests run alone on the CPU; the rest run beside them at idle CPU priority "
              f"({group.path}), their output in {log.name}, printed after", flush=True)
        started = time.monotonic()
        rest = subprocess.Popen(pytest(REST + extra), stdout=log, stderr=subprocess.STDOUT, preexec_fn=group.enter)
        threading.Thread(target=lambda: (rest.wait(), rest_done.touch()), daemon=True).start()
        try:
            timing = run_timing(extra, dict(os.environ, DBSURGE_TEST_SUITE_REST_DONE=str(rest_done)))
            print(f"suite: the timing tests ended after {time.monotonic() - started:.0f} s", flush=True)
            code = rest.wait()
        except BaseException:
            rest.terminate()
            rest.wait()
            raise
        finally:
            group.remove()
            rest_done.unlink(missing_ok=True)
        print(f"suite: the rest ended after {time.monotonic() - started:.0f} s; their output:", flush=True)
        log.seek(0)
        sys.stdout.write(log.read())
        sys.stdout.flush()
    os.unlink(log.name)
    return timing or code


def _print_cpu(path: Path, top: int = 20) -> None:
    """The timing tests that used the most CPU (the rest get only what these leave), and the whole part's."""
    rows = []
    for line in _read(path).splitlines():
        cpu, wall, nodeid = line.split("\t", 2)
        rows.append((float(cpu), float(wall), nodeid))
    if not rows:
        return
    total_cpu, total_wall = sum(r[0] for r in rows), sum(r[1] for r in rows)
    print(f"suite: the timing tests used {total_cpu:.0f} CPU-s in {total_wall:.0f} s "
          f"({total_cpu / max(total_wall, 1e-9):.2f} cores on average); the {top} heaviest (CPU-s, s, cores):")
    for cpu, wall, nodeid in sorted(rows, reverse=True)[:top]:
        print(f"  {cpu:7.1f} {wall:6.1f} {cpu / max(wall, 1e-9):5.2f}  {nodeid}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/suite.py", description=__doc__.splitlines()[0])
    parser.add_argument("--side-by-side", action="store_true",
                        help="the rest beside the timing tests at idle CPU priority: about 16 minutes instead of 25, "
                             "but 2 or 3 of the rest's runs starve and fail in each (docs/testing.md)")
    args, extra = parser.parse_known_args(argv)
    if not args.side_by_side:
        return sequential(extra)
    group, why = IdleGroup.make()
    if group is None:
        print(f"suite: no idle CPU group here ({why}): the two parts run one after the other", flush=True)
        return sequential(extra)
    return side_by_side(group, extra)


if __name__ == "__main__":
    sys.exit(main())
