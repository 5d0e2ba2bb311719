"""Option names: an unknown one is refused (command line, config files) or warned about (``DBSURGE_*``) before
anything starts, and the config files a run read are named.

Locust's parser takes what it does not know from a config file as ``--key=value`` and fails on it
only in the Locust child, after an embedded server started, as ``__main__.py: error``; a scenario
would pass an unknown option on to every step it runs. `refuse_unknown` says it first, in one line
that names the nearest real option (`difflib`)::

    >>> nearest("--ratee", ["--rate", "--rate-limit", "--seed"])
    '--rate'
    >>> unknown_message("--ratee", ["--rate", "--seed"])
    'unknown option --ratee (did you mean --rate?)'

Only names are judged here; what an option's value may be is `dbsurge.engine.validate`'s business.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from dbsurge.base.errors import UserError, clip

#: ``DBSURGE_*`` variables that dbsurge reads although no option declares them (internal or per-host settings).
INTERNAL_ENV = frozenset({
    "DBSURGE_HOME", "DBSURGE_CONSOLE", "DBSURGE_FINAL_TABLES", "DBSURGE_TARGET_PASSWORD", "DBSURGE_JOIN_TOKEN",
    "DBSURGE_JOIN_TOKEN_SECRET", "DBSURGE_IMDS_ENDPOINT", "DBSURGE_SPOT_WATCH", "DBSURGE_MASTER_HOST",
    "DBSURGE_MASTER_PORT", "DBSURGE_RAW_SAMPLES_DIR", "DBSURGE_WORKLOAD", "DBSURGE_SHAPE", "DBSURGE_IMAGE",
    "DBSURGE_EMBEDDED_NAMES", "DBSURGE_INSECURE_JOIN",
    # the size bounds' overrides (dbsurge.config.size_limits) and what dbsurge run hands its Locust child
    "DBSURGE_MAX_PROCESSES", "DBSURGE_MAX_HOST_USERS", "DBSURGE_MAX_STAGES", "DBSURGE_MAX_ARRIVALS",
    "DBSURGE_MAX_CONNECTIONS",
    "DBSURGE_END_WITH_PLAN", "DBSURGE_PARENT_PID", "DBSURGE_RUN_DIRS", "DBSURGE_RUNNER_VENV",
    # a worker's own temporary folder and its owner (dbsurge.commands.worker, docker/entrypoint.sh)
    "DBSURGE_WORKER_TMPDIR", "DBSURGE_WORKER_TMPDIR_PID",
    # embedded-cassandra's JVM heap and Cassandra release (dbsurge.embedded.cassandra_jvm)
    "DBSURGE_CASSANDRA_HEAP", "DBSURGE_CASSANDRA_VERSION",
})
#: Prefixes of variables for the test suite and benchmarks only.
INTERNAL_PREFIXES = ("DBSURGE_TEST_", "DBSURGE_BENCH_")

#: Config-file keys that are dbsurge run's own and cannot come from a file (Locust would refuse them).
_NOT_IN_FILES = {"workload": "DBSURGE_WORKLOAD", "shape": "DBSURGE_SHAPE"}
_NEGATIVE_NUMBER = re.compile(r"-\d")


def nearest(name: str, candidates: Iterable[str]) -> str | None:
    """The real option closest to a misspelt one (None when nothing is close).

    Compared without their leading dashes (or ``DBSURGE_``), which every candidate shares and which
    would make ``--slo`` look like ``--seed``.
    """
    def bare(text: str) -> str:
        return text.lstrip("-").removeprefix("DBSURGE_")

    by_bare = {bare(c): c for c in sorted(set(candidates), reverse=True)}
    found = difflib.get_close_matches(bare(name), list(by_bare), n=1, cutoff=0.75)
    return by_bare[found[0]] if found else None


def unknown_message(name: str, candidates: Iterable[str], where: str = "", help_hint: str = "dbsurge run --help") -> str:
    """``unknown option --ratee (did you mean --rate?)``; without a near one, where to look."""
    near = nearest(name, candidates)
    hint = f"did you mean {near}?" if near else f"{help_hint} lists every option"
    return f"unknown option {clip(name, 60)}{where} ({hint})"


def long_options(parser) -> list[str]:
    """Every ``--long`` option string a parser knows."""
    return [s for s in getattr(parser, "_option_string_actions", {}) if s.startswith("--")]


def command_line_names(argv: Iterable[str]) -> list[str]:
    """The option names written on a command line (``--rate`` of ``--rate=5``), up to a ``--``."""
    names = []
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("-") and len(arg) > 1 and not _NEGATIVE_NUMBER.match(arg):
            names.append(arg.split("=", 1)[0])
    return names


def refuse_unknown(parser, argv: list[str], unknown: list[str], extra: Iterable[str] = (),
                   help_hint: str = "dbsurge run --help") -> None:
    """Raise `UserError` for the first unknown option name, on the command line or in a config file.

    ``unknown`` is what ``parser.parse_known_args(argv)`` left over. A config file's key must be an
    option's full name: Locust's parser turns ``key = value`` into ``--key=value``, so a misspelt key
    would fail in the Locust child and a short one (``workload``) would silently set the option it
    abbreviates (``--workload-option``). ``extra`` are options read elsewhere (``dbsurge run``'s
    own), offered as suggestions too.
    """
    candidates = long_options(parser) + list(extra)
    known = set(long_options(parser))
    written = set(command_line_names(argv))
    names = [u.split("=", 1)[0] for u in unknown if u.startswith("-") and not _NEGATIVE_NUMBER.match(u)]
    for name in names:
        if name in written:
            raise UserError(unknown_message(name, candidates, help_hint=help_hint))
    for where, keys in config_file_keys(parser, argv):
        for key in sorted(keys):
            if f"--{key}" in known:
                continue
            if key in _NOT_IN_FILES:
                raise UserError(f"{where}: {key} cannot be set in a config file: pass --{key} on the command line "
                                f"or set {_NOT_IN_FILES[key]}")
            raise UserError(unknown_message(key, [k.lstrip("-") for k in candidates], where=f" in {where}",
                                            help_hint=help_hint))
    if names:
        raise UserError(unknown_message(names[0], candidates, help_hint=help_hint))


def abbreviated(argv: Iterable[str], known: Iterable[str], names: Iterable[str]) -> tuple[str, str] | None:
    """The first ``--name`` on `argv` that is not an option in `known` but the start of one of `names`
    (``--rat`` of ``--rate``), with that option; None when there is none.

        >>> abbreviated(["--rat", "5", "--seed", "1"], ["--rate", "--seed"], ["--rate"])
        ('--rat', '--rate')
    """
    known, names = set(known), sorted(set(names))
    for name in command_line_names(argv):
        if not name.startswith("--") or name in known:
            continue
        hits = [n for n in names if n.startswith(name)]
        if hits:
            return name, hits[0]
    return None


def refuse_abbreviations(parser, names: Iterable[str] | None = None) -> None:
    """Make `parser` (Locust's configargparse parser too) refuse a prefix of one of `names` (default: every long
    option it knows) before it parses: argparse takes ``--baseline-tp`` as ``--baseline-tps`` silently.

    Set on the parser object, so every later parse (Locust's web UI parses the command line again) is checked.
    """
    own = list(names) if names is not None else None
    parse_known_args = parser.parse_known_args

    def parse_known_args_whole(args=None, namespace=None, *rest, **kwargs):
        argv = sys.argv[1:] if args is None else list(args)
        known = long_options(parser)
        found = abbreviated(argv, known, own if own is not None else known)
        if found:
            parser.error(f"unknown option {clip(found[0], 60)} (did you mean {found[1]}? options are not "
                         f"abbreviated)")
        return parse_known_args(args, namespace, *rest, **kwargs)

    parser.parse_known_args = parse_known_args_whole


def parser_error(parser, message: str) -> UserError:
    """argparse's error as dbsurge's one line: ``unrecognized arguments: --ratee 5`` names the nearest option.

    For every parser of its own (scenarios, ``dbsurge rerun``, ``load``, ``report``, ``cost``...), so an
    unknown option anywhere reads the same.
    """
    prog = getattr(parser, "prog", "dbsurge")
    if message.startswith("unrecognized arguments:"):
        names = command_line_names(message.split(":", 1)[1].split())
        if names:
            return UserError(f"{prog}: " + unknown_message(names[0], long_options(parser), help_hint=f"{prog} --help"))
    return UserError(f"{prog}: {clip(message, 200)}")


class OneLineParser(argparse.ArgumentParser):
    """argparse that ends in dbsurge's one line (`parser_error`), not its usage text and exit 2.

    No option is abbreviated (``allow_abbrev=False``, for its subparsers too: they are made of this class):
    argparse's default took ``--rat 100`` as ``--rate 100`` without a word, where the README says a
    misspelt option is refused.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise parser_error(self, message)


def config_file_keys(parser, argv: list[str]) -> list[tuple[str, set[str]]]:
    """The config files the parser reads for this command line (``--config``, ./locust.conf, ...), with their keys."""
    out = []
    try:
        for stream, label in parser._open_config_files(list(argv)):
            try:
                keys = set(parser._config_file_parser.parse(stream))
            finally:
                stream.close()
            if keys:
                out.append((label, keys))
    except Exception:  # noqa: BLE001 - a file Locust cannot parse is Locust's error to report, not this check's
        return out
    return out


def config_files_in_use(explicit: str | None = None) -> list[str]:
    """What Locust reads for a run in this directory: ``--config FILE`` and the default files that exist.

    The defaults are Locust's (``~/.locust.conf``, ``./locust.conf``, ``./pyproject.toml`` when it has a
    ``[tool.locust]`` table), read before ``--config``; absolute paths, for run.json.
    """
    from locust.argument_parser import DEFAULT_CONFIG_FILES

    found = []
    for entry in DEFAULT_CONFIG_FILES:
        path = Path(entry).expanduser()
        if not path.is_file():
            continue
        if path.name == "pyproject.toml" and "[tool.locust" not in _text(path):
            continue
        found.append(str(path.resolve()))
    if explicit and Path(explicit).expanduser().is_file():
        found.append(str(Path(explicit).expanduser().resolve()))
    return list(dict.fromkeys(found))


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def known_env(parser=None, extra: Iterable[str] = ()) -> set[str]:
    """The ``DBSURGE_*`` variables something reads: the options' aliases, ``extra`` and `INTERNAL_ENV`."""
    names = set(INTERNAL_ENV) | set(extra)
    for action in getattr(parser, "_actions", []):
        if getattr(action, "env_var", None):
            names.add(action.env_var)
    return names


def warn_unknown_env(known: set[str], environ: dict[str, str] | None = None, stream=None) -> list[str]:
    """One warning line per ``DBSURGE_*`` variable that nothing reads, naming the nearest that something does.

    A ``NAME_FILE`` variable of a known ``NAME`` (the container-secrets convention) counts as known.
    """
    environ = os.environ if environ is None else environ
    stream = sys.stderr if stream is None else stream
    lines = []
    for name in sorted(environ):
        if not name.startswith("DBSURGE_") or name in known or name.startswith(INTERNAL_PREFIXES):
            continue
        if name.endswith("_FILE") and name[:-5] in known:
            continue
        near = nearest(name, known)
        hint = f"did you mean {near}?" if near else "no option reads it"
        lines.append(f"dbsurge: warning: environment variable {clip(name, 60)} is ignored ({hint})")
    for line in lines:
        stream.write(line + "\n")
    stream.flush()
    return lines
