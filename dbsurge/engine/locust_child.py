"""``dbsurge run`` and its Locust child: started, watched and ended together.

The parent (`run_child`) starts Locust in its own process group and forwards SIGINT and SIGTERM
to it, once each (in the terminal's group the child would get a Ctrl-C twice: from the terminal
and from us). Beyond that, the two live and die together:

- **The parent dies** (even ``kill -9``): the kernel sends the child SIGTERM (``PR_SET_PDEATHSIG``,
  set between fork and exec), and the child stops the load as for any SIGTERM: it stops issuing,
  drains, writes its files. A parent that died before the child could ask for this is caught
  when the child's plugin loads (`parent_gone`).
- **A signal comes before the child can handle it** (Python and Locust still starting): SIGINT
  is ignored in the child until dbsurge's handlers are in (no KeyboardInterrupt traceback); the
  parent sees that from ``/proc`` (`_catches`), ends the child's process group, which cannot
  have sent any load yet, and says so in one line.
- **The child dies** (SIGKILL, a crash): the parent ends its process group (``--processes``
  workers with it: nothing keeps loading), and finalises every run directory the child left
  unfinished (`finalise_run_dir`): run.json ended and marked stopped, summary.md from what was
  measured, no temporary file left. One line, exit 3.

The child tells the parent its run directories through the file named in ``DBSURGE_RUN_DIRS``
(`note_run_dir`), one path a line.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dbsurge.base.errors import EXIT_INCOMPLETE, EXIT_SIGNAL
from dbsurge.engine.collector_hooks import collectors
from dbsurge.rundir.schema import RUN_JSON
from dbsurge.rundir.writer import finalise, run_dir_finalised

#: Where the child writes each run directory it makes (one path a line), for the parent to finalise.
RUN_DIRS_ENV = "DBSURGE_RUN_DIRS"
#: The parent's pid: a child whose parent is another process (it was re-parented) stops.
PARENT_PID_ENV = "DBSURGE_PARENT_PID"
#: Set by ``dbsurge run --web``: the process ends when the plan does (a hand-run ``locust`` UI stays up).
END_WITH_PLAN_ENV = "DBSURGE_END_WITH_PLAN"

#: Signals the ``dbsurge`` command received before it could act on them (`dbsurge.commands.cli.EARLY_SIGNALS`):
#: `run_child` starts no Locust after one.
PENDING_SIGNALS: list[int] = []

PR_SET_PDEATHSIG = 1


# -- the parent's side ---------------------------------------------------------------------------------------


def _in_child(parent_pid: int) -> None:
    """Between fork and exec: ignore SIGINT until dbsurge's handlers are in, and die with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the child's plugin still checks its parent
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl: never start
        os._exit(EXIT_SIGNAL[signal.SIGTERM])


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (``SigCgt`` in /proc/PID/status)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    except (OSError, ValueError):
        return True  # no /proc: forward it and let the child's own disposition decide
    return True


def _end_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the child's process group (its ``--processes`` workers share it)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_child(cmd: list[str], env: dict | None = None) -> int:
    """Run Locust as a child (see the module docstring); return dbsurge's exit code for the run."""
    fd, dirs_file = tempfile.mkstemp(prefix="dbsurge-run-", suffix=".dirs")
    os.close(fd)
    parent = os.getpid()
    child_env = {**(os.environ if env is None else env), RUN_DIRS_ENV: dirs_file, PARENT_PID_ENV: str(parent)}
    started = time.time()
    forwarded: list[int] = []
    cut_short: list[int] = []  # signals that came before the child could handle them
    proc: subprocess.Popen | None = None

    def forward(signum, _frame):
        forwarded.append(signum)
        if proc is None:  # not started yet: it is ended as soon as it is
            cut_short.append(signum)
            return
        if proc.poll() is not None:
            return
        if _catches(proc.pid, signum):
            try:
                proc.send_signal(signum)
            except ProcessLookupError:
                pass
        else:  # Python or Locust still starting: nothing can have been sent yet
            cut_short.append(signum)
            _end_group(proc.pid)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if PENDING_SIGNALS:  # one came while this process was still starting: no child, no load
            forwarded.append(PENDING_SIGNALS[0])
            cut_short.append(PENDING_SIGNALS[0])
            return ending(-PENDING_SIGNALS[0], forwarded, cut_short, [], started)
        proc = subprocess.Popen(cmd, env=child_env, process_group=0,
                                preexec_fn=lambda: _in_child(parent))  # noqa: PLW1509 - this process has one thread
        if cut_short:
            _end_group(proc.pid)
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:
                continue
        _end_group(proc.pid)  # whatever of its group is left (workers of a child that died)
        return ending(code, forwarded, cut_short, _read_dirs(dirs_file), started)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        Path(dirs_file).unlink(missing_ok=True)


def _read_dirs(path: str) -> list[Path]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return []
    return [Path(p) for p in dict.fromkeys(line.strip() for line in lines) if p]


def ending(code: int, forwarded: list[int], cut_short: list[int], dirs: list[Path], started: float) -> int:
    """The parent's exit code and last line once the child has ended with ``code`` (negative: a signal)."""
    unfinished = [d for d in dirs if not run_dir_finalised(d)]
    if code >= 0 and not unfinished:
        return code  # the child said everything itself
    if code > 0 and forwarded and not cut_short and dirs:
        # Signals asked the run to stop and it ended by itself, a second one before it finalised run.json:
        # finish from what is there without the report (which `dbsurge report` builds): a second signal
        # must end the command in about a second, whatever the size of the plan.
        name = signal.Signals(forwarded[-1]).name
        for d in unfinished:
            finalise_run_dir(d, f"{name} again: the run ended before it finalised {RUN_JSON}", head="INTERRUPTED",
                             report=False)
        return code
    if code > 0 and not forwarded and unfinished:
        # The child ended by itself and printed its verdict, but could not finalise run.json (a results
        # directory that went unwritable): finish what can be finished, keep its verdict and exit code.
        for d in unfinished:
            verdict = finalise_run_dir(d, f"the run ended (exit {code}) before it could finalise {RUN_JSON}",
                                       head="INCOMPLETE")
            if "could not be finalised" in verdict:
                _say(f"dbsurge: {RUN_JSON} could not be finalised in {d}: the directory cannot be written; "
                     "the verdict above stands")
        return code
    signame = signal.Signals(-code).name if code < 0 else None
    if forwarded and (cut_short or not dirs):
        name = signal.Signals(forwarded[0]).name
        _say(f"dbsurge: {name} before the load started: nothing was sent "
             f"(exit {EXIT_SIGNAL.get(forwarded[0], 128 + forwarded[0])})")
        return EXIT_SIGNAL.get(forwarded[0], 128 + forwarded[0])
    how = f"was killed by {signame}" if signame else f"exited with code {code} before finishing the run"
    if not unfinished:
        _say(f"dbsurge: KILLED: the Locust process {how} after {time.time() - started:.1f} s, before any run "
             f"directory was made: nothing to account for (exit {EXIT_INCOMPLETE})")
        return EXIT_INCOMPLETE
    for d in unfinished:
        verdict = finalise_run_dir(d, f"the Locust process {how}")
        _say(f"dbsurge: {verdict}")
        _say(f"results: {d}")
    return EXIT_INCOMPLETE


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:  # nobody is reading any more
        pass


# -- a run directory the child could not finish ------------------------------------------------------------


def finalise_run_dir(path: Path, why: str, head: str = "KILLED", *, report: bool = True) -> str:
    """End a run directory whose process died (`dbsurge.rundir.writer.finalise`), its summary built by
    ``dbsurge report``'s builder, or (``report=False``, a hurried ending) the verdict alone. Returns the verdict."""
    return finalise(path, why, head, build_report=collectors().build_report if report else None)


# -- the child's side --------------------------------------------------------------------------------------


def note_run_dir(path: Path) -> None:
    """Child: tell the parent about a run directory (so it can finalise it if this process dies)."""
    where = os.environ.get(RUN_DIRS_ENV)
    if not where:
        return
    try:
        with open(where, "a") as f:
            f.write(f"{Path(path).resolve()}\n")
    except OSError:
        pass


def parent_gone() -> bool:
    """Child: whether the ``dbsurge run`` that started this process has died (it was re-parented)."""
    parent = os.environ.get(PARENT_PID_ENV)
    return bool(parent) and parent.isdigit() and os.getppid() != int(parent)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """This process gets ``sig`` when its parent dies (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass
