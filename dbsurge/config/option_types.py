"""Number types for command-line options: ASCII digits only, finite, refused in one line.

Python's ``int()`` and ``float()`` take more than a user means: ``float("٥٠")`` (Arabic-Indic digits)
is 50.0, ``int("1_000")`` is 1000, ``float("nan")`` and ``float("1e400")`` (inf) pass, and
``int("١٠")`` too. These types take what a person types on a keyboard for a number, as the rate
endpoint of the web UI does, and nothing else:

    >>> ascii_float("2.5"), ascii_int("-1")
    (2.5, -1)
    >>> ascii_float("٥٠")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a number in ASCII digits such as 80 or 2.5, not '٥٠'
    >>> ascii_int("1_000")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a whole number in ASCII digits such as 8, not '1_000'

argparse turns `ArgumentTypeError` into ``argument --rate: expected ...``, which dbsurge's parsers
print as its one line. `strict_numbers` puts them on a parser's existing ``int`` and ``float``
options (Locust's own ``--web-port``, ``-u``, ``--processes``...).
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from dbsurge.base.errors import clip

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: More digits than any count or port needs; int() of a 100,000-digit string is slow and says nothing.
_MAX_DIGITS = 30


class NumberError(ValueError):
    """Text that is not a number as a person types one; the message says what was expected."""


def read_int(text: Any) -> int:
    """The one reader of whole numbers from text: ASCII digits with an optional sign, else `NumberError`.

    Every number option reads through here or `read_float` (the command line, config files and the
    environment through `ascii_int`; workload options through `dbsurge.workloads.base.integer`), so
    ``١٠٠`` (Arabic-Indic), ``１００`` (fullwidth) and ``1_0_0`` are refused wherever they are typed.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return text  # a default given as a number
    s = str(text).strip()
    if not _INT.fullmatch(s) or len(s) > _MAX_DIGITS:
        raise NumberError("expected a whole number in ASCII digits such as 8")
    return int(s)


def read_float(text: Any) -> float:
    """The one reader of numbers from text: finite, in ASCII digits (``80``, ``2.5``, ``1e3``), else `NumberError`."""
    if isinstance(text, (int, float)) and not isinstance(text, bool) and math.isfinite(text):
        return float(text)
    s = str(text).strip()
    if not _FLOAT.fullmatch(s) or len(s) > _MAX_DIGITS:
        raise NumberError("expected a number in ASCII digits such as 80 or 2.5")
    value = float(s)
    if not math.isfinite(value):  # 1e400
        raise NumberError("too large a number")
    return value


def ascii_int(text: Any) -> int:
    """A whole number written in ASCII digits (an optional sign), else `argparse.ArgumentTypeError`."""
    try:
        return read_int(text)
    except NumberError as e:
        raise argparse.ArgumentTypeError(f"{e}, not '{clip(text)}'") from None


def ascii_float(text: Any) -> float:
    """A finite number written in ASCII digits (``80``, ``2.5``, ``1e3``), else `argparse.ArgumentTypeError`."""
    try:
        return read_float(text)
    except NumberError as e:
        if str(e) == "too large a number":
            raise argparse.ArgumentTypeError(f"'{clip(text)}' is too large a number") from None
        raise argparse.ArgumentTypeError(f"{e}, not '{clip(text)}'") from None


def _checked_first(strict, original):
    """A type that takes the text through `strict` (ASCII digits) before Locust's own `original` check."""
    def convert(text: Any) -> Any:
        if isinstance(text, str):
            strict(text)
        return original(text)

    convert.__name__ = getattr(original, "__name__", "value")
    return convert


def _ascii_timespan(text: Any) -> str:
    """Locust's ``-t`` text (``1h30m``) in ASCII: its parser's ``\\d`` takes other digits too."""
    if isinstance(text, str) and not text.isascii():
        raise argparse.ArgumentTypeError(f"expected a time span in ASCII such as 30s or 1h30m, not '{clip(text)}'")
    return text


def strict_numbers(parser: argparse.ArgumentParser) -> None:
    """Put `ascii_int` and `ascii_float` on `parser`'s numeric options: its ``int`` and ``float`` ones, and
    Locust's own checks (``gt_zero(float)``, ``positive_integer``, ``timespan``) after an ASCII check."""
    for action in parser._actions:  # argparse has no public list of a parser's options
        kind = action.type
        name = getattr(kind, "__qualname__", "")
        if kind is int:
            action.type = ascii_int
        elif kind is float:
            action.type = ascii_float
        elif name.startswith("gt_zero."):
            action.type = _checked_first(ascii_float, kind)
        elif name == "positive_integer":
            action.type = _checked_first(ascii_int, kind)
        elif name == "timespan":
            action.type = _checked_first(_ascii_timespan, kind)
