"""One generic override flag for every study config: `--set key=value`, repeatable.

Keys name fields of the study's frozen config dataclass; `models.NAME.field` (or
`models.*.field`) reaches the fields of one model spec (or of all). Values are parsed by
the field's type: integers, floats (a fraction such as `8/255` is allowed, so budgets are
written in pixel units), booleans (`true` / `false`), strings, and tuples as
comma-separated items. An unknown key or a value of the wrong type is a `ValueError` that
names the key and the expected type; the config's own checks then run on the result.
"""

import dataclasses
import types
import typing
from collections.abc import Sequence
from fractions import Fraction


def _number(text: str, kind: type, key: str):
    try:
        if kind is int:
            return int(text)
        return float(Fraction(text.strip())) if "/" in text else float(text)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"--set {key}={text!r}: expected {kind.__name__}") from None


def parse_value(text: str, annotation, key: str):
    """`text` as a value of the type `annotation` (see the module docstring)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if text.lower() in ("none", "null"):
            return None
        return parse_value(text, options[0], key)
    if origin is tuple:
        (item, *_rest) = typing.get_args(annotation)
        return tuple(parse_value(part, item, key) for part in text.split(",") if part != "")
    if annotation is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"--set {key}={text!r}: expected true or false")
        return text.lower() in ("true", "1")
    if annotation in (int, float):
        return _number(text, annotation, key)
    if annotation is str:
        return text
    raise ValueError(
        f"--set {key}: a field of type {annotation} cannot be set from the command line"
    )


def _fields(config) -> dict:
    hints = typing.get_type_hints(type(config))
    return {f.name: hints[f.name] for f in dataclasses.fields(config)}


def _set_field(config, name: str, text: str, key: str):
    fields = _fields(config)
    if name not in fields:
        raise ValueError(
            f"--set {key}: unknown field {name!r}; fields: {', '.join(sorted(fields))}"
        )
    return dataclasses.replace(config, **{name: parse_value(text, fields[name], key)})


def apply_overrides(config, assignments: Sequence[str]):
    """`config` with each `key=value` of `assignments` applied, in order."""
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set {assignment!r}: expected key=value")
        if key.startswith("models."):
            _, _, rest = key.partition(".")
            model_name, _, field = rest.partition(".")
            names = [m.name for m in config.models]
            if model_name != "*" and model_name not in names:
                raise ValueError(f"--set {key}: unknown model {model_name!r}; models: {names}")
            models = tuple(
                _set_field(m, field, text, key) if model_name in ("*", m.name) else m
                for m in config.models
            )
            config = dataclasses.replace(config, models=models)
        else:
            config = _set_field(config, key, text, key)
    return config
