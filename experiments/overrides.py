"""One generic override flag for every study config: `--set key=value`, repeatable.

Keys name fields of the study's frozen config dataclass. A dotted key reaches a field of a
nested config dataclass (`classifier.epochs=3`, `model.train.learning_rate=1/1000`), and
in a tuple of named specs one spec by name or all of them by `*` (`models.standard.epochs=3`,
`models.*.epochs=1`). Values are parsed by the field's type: integers, floats (a fraction
such as `8/255` is allowed, so budgets are written in pixel units), booleans (`true` /
`false`), strings, `none` for an optional field, tuples as comma-separated items and pairs
inside them as `a:b` (`points=100:0.1,500:0.2`). An unknown key or a value of the wrong type
is a `ValueError` that names the full key and the expected type.

Every assignment is gathered first and each config is rebuilt once with all of its new
values, so the config's own checks run on the whole result, not on a half-applied one, and
an order of flags that passes through a momentarily inconsistent state is not refused.
`check_int`, `check_real`, `check_choices` and `check_choice` are the field checks the
study configs run on themselves, with messages in the `--set` key's own spelling and units.
"""

import dataclasses
import math
import re
import types
import typing
from collections.abc import Sequence

from advjax.evaluation import parse_eps


class _Update(typing.NamedTuple):
    """One `--set` assignment: its path below the config being rebuilt, its text, its key."""

    path: tuple[str, ...]
    text: str
    key: str


def _number(text: str, kind: type, key: str):
    try:
        if kind is int:
            return int(text)
        if "/" not in text:
            return float(text)
        text = text.strip()  # a fraction, by the one eps parser; its sign here
        return -parse_eps(text[1:]) if text.startswith("-") else parse_eps(text)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"--set {key}={text!r}: expected {kind.__name__}") from None


def _tuple(text: str, items: tuple, key: str, sep: str):
    if len(items) == 2 and items[1] is Ellipsis:
        return tuple(parse_value(part, items[0], key, _sep=":") for part in text.split(sep) if part)
    parts = text.split(sep)
    if len(parts) != len(items):
        spelled = sep.join(getattr(t, "__name__", str(t)) for t in items)
        raise ValueError(f"--set {key}={text!r}: expected {len(items)} items as {spelled}")
    return tuple(parse_value(p, t, key, _sep=":") for p, t in zip(parts, items, strict=True))


def parse_value(text: str, annotation, key: str, *, _sep: str = ","):
    """`text` as a value of the type `annotation` (see the module docstring).

    Raises:
      ValueError: `text` is not of that type, or the type cannot be written on a command
        line (a nested config: set its fields by dotted keys instead); the message names
        `key`.
    """
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if text.lower() in ("none", "null"):
            return None
        return parse_value(text, options[0], key, _sep=_sep)
    if origin is tuple:
        return _tuple(text, typing.get_args(annotation), key, _sep)
    if annotation is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"--set {key}={text!r}: expected true or false")
        return text.lower() in ("true", "1")
    if annotation in (int, float):
        return _number(text, annotation, key)
    if annotation is str:
        return text
    if dataclasses.is_dataclass(annotation):
        raise ValueError(
            f"--set {key}: a group of fields; set one of them by its dotted key, "
            f"e.g. {key}.{dataclasses.fields(annotation)[0].name}=..."
        )
    raise ValueError(
        f"--set {key}: a field of type {annotation} cannot be set from the command line"
    )


def _fields(config) -> dict:
    hints = typing.get_type_hints(type(config))
    return {f.name: hints[f.name] for f in dataclasses.fields(config)}


def _parse(assignment: str) -> _Update:
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key or "" in key.split("."):
        raise ValueError(
            f"--set {assignment!r}: expected key=value (dotted keys for nested fields)"
        )
    return _Update(tuple(key.split(".")), text, key)


def _is_spec_tuple(value) -> bool:
    return (
        isinstance(value, tuple)
        and bool(value)
        and all(dataclasses.is_dataclass(v) and hasattr(v, "name") for v in value)
    )


def _qualified(error: Exception, config, prefix: str, updates: list[_Update]) -> ValueError:
    """`error` of a nested config's own checks, its leading field named by the full key and
    prefixed by the assignments unless it names them already."""
    message = str(error)
    match = re.match(r"(\w+)=", message)
    if prefix and match and match.group(1) in _fields(config):
        message = prefix + message
    if not all(u.key in message for u in updates):
        spelled = ", ".join(f"{u.key}={u.text}" for u in updates)
        message = f"--set {spelled}: {message}"
    return ValueError(message)


def _rebuild_specs(specs: tuple, updates: list[_Update], where: str) -> tuple:
    names = [s.name for s in specs]
    by_spec: list[list[_Update]] = [[] for _ in specs]
    for u in updates:
        if len(u.path) < 2:
            raise ValueError(f"--set {u.key}: expected {where}.NAME.field (NAME or *)")
        name, rest = u.path[0], u.path[1:]
        if name != "*" and name not in names:
            raise ValueError(f"--set {u.key}: unknown model {name!r}; models: {names}")
        for i, spec_name in enumerate(names):
            if name in ("*", spec_name):
                by_spec[i].append(_Update(rest, u.text, u.key))
    return tuple(
        _rebuild(spec, todo, f"{where}.{spec.name}.") if todo else spec
        for spec, todo in zip(specs, by_spec, strict=True)
    )


def _rebuild(config, updates: list[_Update], prefix: str = ""):
    """`config` with every update applied in one `dataclasses.replace` (later ones win)."""
    fields = _fields(config)
    values: dict = {}
    nested: dict[str, list[_Update]] = {}
    for u in updates:
        name, rest = u.path[0], u.path[1:]
        if name not in fields:
            where = f" of {prefix[:-1]}" if prefix else ""
            raise ValueError(
                f"--set {u.key}: unknown field {name!r}{where}; fields: {', '.join(sorted(fields))}"
            )
        if rest:
            nested.setdefault(name, []).append(_Update(rest, u.text, u.key))
        else:
            values[name] = parse_value(u.text, fields[name], u.key)
    for name, todo in nested.items():
        if name in values:
            raise ValueError(f"--set {todo[0].key}: {prefix}{name} is also set whole")
        current = getattr(config, name)
        if _is_spec_tuple(current):
            values[name] = _rebuild_specs(current, todo, f"{prefix}{name}")
        elif dataclasses.is_dataclass(current):
            values[name] = _rebuild(current, todo, f"{prefix}{name}.")
        else:
            raise ValueError(
                f"--set {todo[0].key}: {prefix}{name}={current!r} has no fields to set"
            )
    try:
        return dataclasses.replace(config, **values)
    except (ValueError, TypeError) as error:
        if not prefix:
            raise
        raise _qualified(error, config, prefix, updates) from error


def apply_overrides(config, assignments: Sequence[str]):
    """`config` with every `key=value` of `assignments` applied (later ones win on a key).

    Raises:
      ValueError: a malformed assignment, an unknown key, a value of the wrong type, or a
        value the config's own checks refuse; the message names the full `--set` key.
    """
    updates = [_parse(a) for a in assignments]
    return _rebuild(config, updates) if updates else config


def check_int(key: str, value, *, low: int, high: int | None = None) -> None:
    """Raise ValueError unless `value` is an integer in [low, high] (high None: no bound);
    the message names `key` as `--set` spells it."""
    bad = isinstance(value, bool) or not isinstance(value, int)
    if bad or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{key}={value!r} must be an integer {bound}")


def check_real(key: str, value, *, low: float, high: float = math.inf, closed: str = "[]") -> None:
    """Raise ValueError unless `value` is a number in the interval from `low` to `high`,
    each end closed or open as `closed` says ("[]", "[)", "(]" or "()")."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    above = number and (value >= low if closed[0] == "[" else value > low)
    below = number and (value <= high if closed[1] == "]" else value < high)
    if not (number and math.isfinite(value) and above and below):
        if high == math.inf:
            bound = f"{'>=' if closed[0] == '[' else '>'} {low:g}"
        else:
            bound = f"in {closed[0]}{low:g}, {high:g}{closed[1]}"
        raise ValueError(f"{key}={value!r} must be a number {bound}")


def check_choices(key: str, values, known: Sequence[str]) -> None:
    """Raise ValueError unless `values` is a non-empty tuple of distinct names from `known`."""
    unknown = [v for v in values if v not in known]
    if unknown or not values or len(set(values)) != len(values):
        what = f"unknown {unknown}" if unknown else "empty" if not values else "repeated names"
        raise ValueError(
            f"{key}={tuple(values)!r} ({what}) must be distinct names from {tuple(known)}"
        )


def check_choice(key: str, value, known: Sequence[str]) -> None:
    """Raise ValueError unless `value` is one of `known`."""
    if value not in known:
        raise ValueError(f"{key}={value!r} must be one of {tuple(known)}")


def add_set_flag(parser, examples: str) -> None:
    """Add the studies' repeatable `--set KEY=VALUE` flag (into `args.overrides`) to `parser`."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a config field (repeatable): e.g. {examples}",
    )
