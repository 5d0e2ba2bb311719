"""The web UI's forms checked as the command line checks them (docs/web-ui.md), before anything starts.

Locust's ``POST /swarm`` copies every form field over the run's options with the option's type and no other
check: ``arrivals=bogus`` started a test that failed in ``test_start`` with a traceback and sent nothing,
then ended OK; ``max_lag=-1s``, ``max_users=-5``, ``spawn_rate=1e400`` and ``user_count=-1`` (under a shape)
were a ``success: true``; a field named twice kept one value of the two without a word. Here the form is
read first (`check_swarm_form`):

- a field given more than once is refused, naming it (``user_classes`` and list options may repeat);
- a field the form does not have is refused (``maxLag``: the form's field is ``max_lag``), and so is one of
  the plan's options, which the run read once, at start-up (`PLAN_OPTIONS`);
- each value goes through the very argparse action the command line's option has (its type, with
  `dbsurge.config.option_types`' ASCII numbers, and its choices), then the whole set through
  `dbsurge.engine.validate`'s `validate_options` and `validate_locust_options`, on a copy of the options:
  the same function for both, so ``max_lag=-1s`` is refused with the words ``--max-lag -1s`` is;
- ``target`` is shown, not changed here: any value but the one shown (or the real one) is refused.

A refused form is ``400 {"success": false, "message": "<one line>"}`` and Locust's swarm never runs.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from dbsurge.base.errors import UserError, clip
from dbsurge.base.redact import redact_uri
from dbsurge.engine.validate import validate_locust_options, validate_options

#: Options read once, when dbsurge starts and builds the plan: the form could change them, the run would not see it.
PLAN_OPTIONS = ("baseline_tps", "stages", "stage_seconds", "rate")
#: Locust's own start-form fields (locust/web.py's ``swarm``), with the option each one sets.
LOCUST_FIELDS = {"user_count": "num_users", "spawn_rate": "spawn_rate", "run_time": "run_time", "host": "host",
                 "profile": "profile", "user_classes": "user_classes", "shape_class": "shape_class"}
#: Fields that may come more than once: Locust reads them with ``getlist``.
_MULTIPLE = frozenset({"user_classes"})
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def duplicate_field(pairs) -> str | None:
    """The first field name that comes more than once in ``(name, value)`` pairs, else None."""
    seen: set[str] = set()
    for name, _value in pairs:
        if name in seen:
            return name
        seen.add(name)
    return None


def _field_refusal(name: str, known: set[str]) -> str:
    snake = _CAMEL.sub("_", name).lower()
    if name in PLAN_OPTIONS or snake in PLAN_OPTIONS:
        flag = "--" + snake.replace("_", "-")
        return (f"{snake} is a plan option, read once when dbsurge starts: restart with {flag} to change it, or "
                f"change the rate from the panel (POST /dbsurge/rate)")
    hint = f" (the form's field is {snake})" if snake != name and snake in known else ""
    return f"unknown field {clip(name, 60)!r} in the start form{hint}"


def _convert(action: argparse.Action, name: str, value: str) -> Any:
    """`value` through the command line's own action for the option: its type, its choices."""
    if action.nargs == 0:  # a switch: Locust's form sends "true" or "false"
        if value not in ("true", "false"):
            raise UserError(f"{name} must be true or false, not {clip(value, 60)!r}")
        return value == "true"
    try:
        converted = action.type(value) if callable(action.type) else value
    except (argparse.ArgumentTypeError, TypeError, ValueError, OverflowError) as e:
        raise UserError(f"bad {name} {clip(value, 60)!r}: {clip(str(e) or 'not a valid value', 160)}") from None
    if action.choices is not None and converted not in action.choices:
        raise UserError(f"bad {name} {clip(value, 60)!r}: choose one of {', '.join(map(str, action.choices))}")
    return converted


def check_swarm_form(form, options: argparse.Namespace, actions: dict[str, argparse.Action], *,
                     extra_fields: set[str], multiple: set[str], plan: bool) -> None:
    """Raise `UserError` (one line) when the start form `form` (a werkzeug MultiDict) would not start the run
    the command line would; return when Locust may take it.

    `options` are the run's (left unchanged: a copy is checked), `actions` the command line's argparse actions
    by dest, `extra_fields` the custom fields the form shows (`multiple`: those that may repeat), `plan`
    whether a dbsurge plan (a shape) runs: then Locust's users, ramp-up and run time are the plan's.
    """
    pairs = list(form.items(multi=True))
    known = set(LOCUST_FIELDS) | set(extra_fields)
    twice = duplicate_field((k, v) for k, v in pairs if k not in _MULTIPLE and k not in multiple)
    if twice is not None:
        raise UserError(f"field {clip(twice, 60)!r} is given more than once: give it once")
    for name, _value in pairs:
        if name not in known:
            raise UserError(_field_refusal(name, known))
    candidate = argparse.Namespace(**vars(options))
    for name, value in pairs:
        _apply_field(candidate, name, value, options, actions, plan=plan)
    validate_options(candidate)
    validate_locust_options(candidate, shape=plan)


def _apply_field(candidate: argparse.Namespace, name: str, value: str, options: argparse.Namespace,
                 actions: dict[str, argparse.Action], *, plan: bool) -> None:
    """Set one form field on `candidate` as the command line's option would be set, or `UserError`."""
    dest = LOCUST_FIELDS.get(name, name)
    if name in ("host", "profile", "user_classes", "shape_class"):
        return  # Locust's own, read by Locust
    if name == "target":
        _check_target(value, options)
        return
    if name in ("user_count", "spawn_rate") and plan and value.strip() in ("", "0"):
        return  # Locust's own form sends 0 for both under a shape, whose users it does not read
    if name == "run_time":
        if not value.strip():
            return  # no run time: until stopped (Locust's reading too)
        if plan:
            raise UserError("run_time does not apply under a dbsurge plan: the plan's stages (or --duration "
                            "of the constant shape, given at start-up) set its length")
    if value == "" and getattr(options, dest, None) in (None, ""):
        return  # an option not given, left empty: Locust keeps it not given
    action = actions.get(dest)
    if action is not None:
        setattr(candidate, dest, _convert(action, name, value))


def _check_target(value: str, options: argparse.Namespace) -> None:
    real = getattr(options, "target", None) or ""
    if value in (real, redact_uri(real) if real else ""):
        return
    raise UserError("target is the database this dbsurge process was started with: it is shown in the form, not "
                    "changed there (start dbsurge again with another --target)")


def form_extra_fields(parser) -> tuple[set[str], set[str]]:
    """The custom fields of Locust's start form (as Locust's ``ui_extra_args_dict`` picks them: the web UI's
    options that are not Locust's own) without the plan's, and those of them that may repeat."""
    from locust.argument_parser import default_args_dict

    own = set(default_args_dict())
    actions = option_actions(parser)
    fields = {name for name in set(getattr(parser, "args_included_in_web_ui", {})) - own - set(PLAN_OPTIONS)
              if name in actions and actions[name].default is not argparse.SUPPRESS}  # not --help: no value
    return fields, set(getattr(parser, "multiple_args_included_in_web_ui", {})) & fields


def option_actions(parser) -> dict[str, argparse.Action]:
    """The command line's argparse actions by dest (Locust's own and dbsurge's)."""
    return {a.dest: a for a in parser._actions if a.option_strings}  # argparse keeps no public list
