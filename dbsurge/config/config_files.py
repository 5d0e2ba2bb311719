"""Config files (``--config FILE``, ./locust.conf, ~/.locust.conf, pyproject.toml) must be text.

Locust's parser (configargparse) opens them in text mode and lets a `UnicodeDecodeError` escape as
a traceback; a NUL byte passes and becomes a garbled option. ``dbsurge run`` reads each file that
the Locust child would read, as bytes, first, and refuses one that is not UTF-8 text in one line
that names the file and where the first bad byte is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from dbsurge.base.errors import UserError, clip
from dbsurge.config.size_limits import FileRefused, read_bounded

#: A config file is a few hundred lines of ``name = value``; more than this is not one.
MAX_CONFIG_BYTES = 10 * 1024 * 1024


def config_file_paths(default_files: Iterable[str], argv: Sequence[str]) -> list[Path]:
    """The config files Locust would read: its defaults that exist, then each ``--config``."""
    paths = [Path(f).expanduser() for f in default_files]
    paths = [p for p in paths if os.path.lexists(p)]
    named: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--config" and i + 1 < len(argv):
            named.append(argv[i + 1])
        elif arg.startswith("--config="):
            named.append(arg.partition("=")[2])
    return paths + [Path(n).expanduser() for n in named]


def check_text_file(path: Path) -> None:
    """`path` is a readable regular file of UTF-8 text without NUL bytes, else one `UserError` line naming it."""
    shown = clip(path, 120)
    what = "a config file holds `name = value` lines (e.g. `rate = 80`)"
    try:
        data = read_bounded(path, MAX_CONFIG_BYTES)  # /dev/zero and a FIFO have st_size 0: no bound
    except FileRefused as e:
        raise UserError(f"config file {shown} {e.reason}: {what}") from None
    except FileNotFoundError:
        raise UserError(f"config file {shown} not found") from None
    except OSError as e:
        raise UserError(f"config file {shown} cannot be read: {e.strerror or type(e).__name__}") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise UserError(f"config file {shown} is not text (a NUL byte at offset {nul}): {what}")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"config file {shown} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}): "
                        f"{what}") from None


def check_config_files(default_files: Iterable[str], argv: Sequence[str]) -> None:
    """`check_text_file` on every config file `config_file_paths` finds."""
    for path in config_file_paths(default_files, argv):
        check_text_file(path)
