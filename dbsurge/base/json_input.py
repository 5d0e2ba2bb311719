"""JSON that dbsurge reads from outside (a run directory's files, an HTTP body): parsed or refused, never a crash.

`json.loads` on ``[`` x 100,000 raises `RecursionError`, not `ValueError`: every ``except ValueError`` around
it let the deepest inputs through as a traceback (``dbsurge report``) or an HTTP 500 (the web UI). And a
value nested just below the interpreter's limit parses, then breaks the next recursive step (``json.dumps``
in a message, a recursive walk). `load_json` turns both into `ValueError` with one line, and refuses any
value nested deeper than `MAX_JSON_DEPTH`: dbsurge writes nothing deeper than a handful of levels.

    >>> load_json('{"rate_tps": [1]}')
    {'rate_tps': [1]}
    >>> load_json("[" * 100_000)
    Traceback (most recent call last):
    ...
    ValueError: nested too deeply (more than 64 levels of arrays and objects)
"""

from __future__ import annotations

import json
from typing import Any

#: The deepest nesting of arrays and objects read; run.json's deepest is about 5.
MAX_JSON_DEPTH = 64

_TOO_DEEP = f"nested too deeply (more than {MAX_JSON_DEPTH} levels of arrays and objects)"


class DuplicateKey(ValueError):
    """An object that names a key twice (`load_json` with ``unique_keys``): ``json.loads`` keeps the last."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is given more than once")
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def load_json(text: str | bytes, *, unique_keys: bool = False) -> Any:
    """`json.loads(text)`, or `ValueError` for text that is not JSON, not UTF-8, or nested too deeply;
    with ``unique_keys``, `DuplicateKey` (a ValueError) for an object that names a key twice."""
    try:
        value = json.loads(text, object_pairs_hook=_unique_pairs) if unique_keys else json.loads(text)
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(_TOO_DEEP)
    return value


def json_depth(value: Any) -> int:
    """How deep arrays and objects nest in `value` (0 for a scalar); walked without recursion, stops past the bound."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest
