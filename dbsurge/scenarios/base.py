"""The scenario framework: the prologue and epilogue every experiment shares, in one place.

An experiment file declares one `Scenario` and holds only its phases and its tables::

    SCENARIO = Scenario(NAME, "Study 001: ...", STUDY, QUICK, report=report, options=add_options,
                        check=check, phases=phases)

    def main(argv):
        return SCENARIO.main(argv)

`Scenario.main` parses the command line (the common options of `scenario_parser` plus the
scenario's own), prints a finished run's table again for ``--from``, fills the study's or the
``--quick`` defaults, parses ``--target-option`` / ``--workload-option``, runs the scenario's
``check(setup)`` (validation only: every `UserError` comes before anything runs) and attaches the
CloudWatch collector. Then one of two kinds of run:

- in process (``phases``): a `ScenarioRun` is opened (target, run directory, raw rows) and
  ``phases(run, setup)`` measures; its return value goes to run.json's ``results``, and the run's
  end writes and prints the report once (`ScenarioRun.finish`).
- through the engine (``launch``): the run id is chosen, the target resolved (an embedded server
  is started for the run and stopped after it), ``launch(setup, uri, run_id)`` runs ``dbsurge run``
  in a child process, and ``after(setup, run_id, code)`` annotates and shows what it wrote.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbsurge.base.errors import EXIT_SIGNAL, UserError
from dbsurge.config.checks import parse_checks
from dbsurge.config.help_examples import epilog
from dbsurge.config.option_names import long_options
from dbsurge.embedded.servers import resolve_embedded
from dbsurge.engine.run_command import locust_namespace, run_parser
from dbsurge.engine.validate import check_operation_names
from dbsurge.rundir import new_run_id
from dbsurge.rundir.reader import check_run_dir
from dbsurge.scenarios.arguments import apply_defaults, parse_key_values, require_target, scenario_parser
from dbsurge.scenarios.capacity import cloudwatch_collector
from dbsurge.scenarios.files import read_meta
from dbsurge.scenarios.report import Report, say, show_report
from dbsurge.scenarios.scenario_run import ScenarioRun
from dbsurge.workloads import WORKLOADS, parse_workload_options


@dataclass
class Setup:
    """What the prologue made of the command line, handed to the scenario's check, phases and launch.

    ``settings`` go to run.json (the chosen defaults, plus what ``check`` adds); ``given`` names
    the defaults the command line set itself; ``values`` are parsed values for the phases only
    (seconds of a duration option, say); ``rest`` are the options an engine scenario does not
    know, passed on to ``dbsurge run``.
    """

    args: argparse.Namespace
    settings: dict[str, Any]
    target_options: dict[str, str]
    workload_options: dict[str, str]
    given: frozenset[str] = frozenset()
    values: dict[str, Any] = field(default_factory=dict)
    collector: Any = None
    rest: list[str] = field(default_factory=list)


def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class Scenario:
    """One experiment: its name, defaults, options, checks, phases (or engine launch) and report."""

    name: str
    description: str
    study: dict[str, Any]
    quick: dict[str, Any]
    report: Callable[[Path], Report]
    options: Callable[[argparse.ArgumentParser], None] = _nothing
    check: Callable[[Setup], None] = _nothing
    phases: Callable[[ScenarioRun, Setup], dict | None] | None = None
    launch: Callable[[Setup, str, str], int] | None = None
    after: Callable[[Setup, str, int], int] | None = None
    cloudwatch: bool = False
    #: The workload of the engine runs when the scenario has no --workload of its own (spike: orders), so that a
    #: typo in a --check passed on (order_creat) is refused before the embedded server starts.
    engine_workload: str | None = None

    def parser(self) -> argparse.ArgumentParser:
        p = scenario_parser(self.name, self.description, cloudwatch=self.cloudwatch)
        self.options(p)
        passes_on = ("Any other option of dbsurge run (dbsurge run --help) passes on to the scenario's runs;\n"
                     "an option neither knows is refused before anything starts." if self.launch is not None else "")
        p.epilog = epilog(f"scenario {self.name}", passes_on)
        p.formatter_class = argparse.RawDescriptionHelpFormatter
        return p

    def main(self, argv: list[str]) -> int:
        """``dbsurge scenario NAME ARGV``: the whole run; returns the exit code."""
        setup = self.prepare(argv)
        if setup is None:
            return 0
        if self.launch is not None:
            return self._through_engine(setup)
        return self._in_process(setup)

    def prepare(self, argv: list[str]) -> Setup | None:
        """Parse and check the command line; None after ``--from`` printed a finished run's table."""
        p = self.parser()
        args, rest = p.parse_known_args(argv) if self.launch is not None else (p.parse_args(argv), [])
        if args.from_run:
            print_from(args.from_run, self.report, self.name)
            return None
        passed = None
        if self.launch is not None:  # its steps are dbsurge runs: they would read the same config files too
            passed = check_passed_options(self.name, p, rest)
        given = frozenset(k for k in self.study if getattr(args, k, None) is not None)
        settings = apply_defaults(args, self.study, self.quick)
        workload = getattr(args, "workload", None) or self.engine_workload
        if passed is not None and workload in WORKLOADS and getattr(passed, "check", None):
            check_operation_names(workload, parse_workload_options(args.workload_option or []), {},
                                  parse_checks(passed.check))
        setup = Setup(args, settings, parse_key_values(args.target_option, "--target-option"),
                      parse_key_values(args.workload_option, "--workload-option"), given, rest=rest)
        self.check(setup)
        if self.cloudwatch and self.launch is None:  # an engine run checks its own --cloudwatch
            setup.collector = cloudwatch_collector(args.cloudwatch, args.cloudwatch_region,
                                                   args.cloudwatch_endpoint_url)
        return setup

    def _in_process(self, setup: Setup) -> int:
        assert self.phases is not None
        with ScenarioRun(self.name, setup.args, setup.settings) as run:
            try:
                results = self.phases(run, setup)
            except BaseException as exc:
                self._after_signal(run, exc)
                raise
            run.finish(self.report, results=results)
        return 0

    def _after_signal(self, run: ScenarioRun, exc: BaseException) -> None:
        """SIGINT or SIGTERM once the load began: mark run.json interrupted and show what was measured.

        A killed ycsb-load said "nothing was sent" while its inserts.csv held 16,000 inserts."""
        import signal

        signum = getattr(exc, "signum", signal.SIGINT if isinstance(exc, KeyboardInterrupt) else None)
        if signum is None or run.rundir is None:
            return
        code = EXIT_SIGNAL.get(signum, 128 + signum)
        try:
            run.interrupted(signum, code)
            show_report(run.path, self.report(run.path), self.name)
        except Exception as e:  # noqa: BLE001 - the raw files are on disk: `dbsurge report` can try again
            say(f"dbsurge: the tables of what was measured could not be built ({type(e).__name__}: {e}); "
                f"`dbsurge report {run.path}` tries again")

    def _through_engine(self, setup: Setup) -> int:
        assert self.launch is not None and self.after is not None
        require_target(setup.args)
        run_id = setup.args.run_id or new_run_id(self.name)
        uri, handle = resolve_embedded(setup.args.target)
        try:
            code = self.launch(setup, uri, run_id)
        finally:
            if handle is not None:
                handle.stop()
        return self.after(setup, run_id, code)

    def show(self, run_dir: Path) -> Report:
        """Build this scenario's report from ``run_dir``, write it there and print it."""
        return show_report(run_dir, self.report(run_dir), self.name)


def check_passed_options(name: str, parser: argparse.ArgumentParser, rest: list[str]) -> argparse.Namespace:
    """The options an engine scenario passes on to ``dbsurge run``: every name must be one it knows.

    Otherwise every step of the scenario would fail on it (``no results (exit 2)``) and the scenario
    would answer a typo with a wrong result; refused here, in one line naming the nearest option of
    the scenario or of ``dbsurge run``, before any server starts.
    """
    _own, more = run_parser().parse_known_args(rest)
    return locust_namespace(more, help_hint=f"dbsurge scenario {name} --help", extra=long_options(parser))


def print_from(run_dir: str, report_of_run: Callable[[Path], Report], scenario: str) -> int:
    """``--from RUN_DIR``: build the report from the files and show it (rewriting its CSV and summary section)."""
    path = Path(run_dir)
    # the run-directory reader's checks, as `dbsurge report` makes them: a damaged file is one line (a run still
    # being written, as longrun's during its hours, has the files that grow left to the scenario's own reader)
    check_run_dir(path, while_written=True)
    meta = read_meta(path)
    if meta.get("scenario") not in (None, scenario):
        raise UserError(f"{path} is a run of scenario {meta.get('scenario')}, not {scenario}")
    show_report(path, report_of_run(path), scenario)
    return 0
