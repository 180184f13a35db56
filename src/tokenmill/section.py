"""The ground floor of every parameter schema: the base model, the shared field types and the one wording of a
parameter's error. Each stage package states its own section's schema beside its code (tokenmill.dedup.params,
tokenmill.train.config, ...) on this base; tokenmill.params only gathers them for the whole-configuration check.

A section is a strict pydantic model: unknown keys and wrong types are errors, an int is accepted where a number
is expected, "3" is not an int, 1 is not true. The stage script resolves its section once, `Dedup.resolve(given)`,
and passes the typed model on; an error is a ParamError of one line per problem, naming the key:

    dedup.near.threshold: expected a number in (0, 1], got 1.5
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Annotated, Any, ClassVar, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

__all__ = ["Count", "Fraction", "ParamError", "Positive", "Section", "check_section"]


class ParamError(ValueError):
    """A parameter that is unknown, of the wrong type or out of range (the schema its stage package states on this
    base); the message names the parameter (its full dotted key), what is allowed and the value given. A
    ValueError, so callers that catch those still do."""


class Section(BaseModel):
    """A section of params.yaml (or a part of one). `section` names it in error lines."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    section: ClassVar[str] = ""

    @classmethod
    def resolve(cls, given: Mapping | None, name: str | None = None):
        """The section with its defaults filled in, or a ParamError listing every problem in it."""
        lines = check_section(name or cls.section, given, cls)
        if lines:
            raise ParamError("; ".join(lines))
        return cls.model_validate(dict(given or {}))

    @classmethod
    def defaults(cls) -> dict:
        """The section's defaults as plain values (a key without one, such as mixture.name, is None)."""
        out = {}
        for key, f in cls.model_fields.items():
            value = None if f.is_required() else f.get_default(call_default_factory=True)
            out[key] = value.model_dump() if isinstance(value, BaseModel) else value
        return out


Fraction = Annotated[float, Field(ge=0, le=1)]  # probabilities, fractions of lines, characters, words
Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(gt=0)]


# ---------------------------------------------------------------------------------------------------------
# Errors as one line each: the dotted key, what is allowed, the value given


def _unwrap(annotation: Any) -> Any:
    """The model class or container an annotation holds (Optional[X] -> X, Annotated[X, ...] -> X)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _field_at(model: type[BaseModel], loc: tuple) -> tuple[type[BaseModel] | None, Any]:
    """(the model holding the last named field of loc, that field's FieldInfo or None)."""
    current: Any = model
    holder, info = None, None
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            if part not in current.model_fields:
                return current, None
            holder, info = current, current.model_fields[part]
            current = info.annotation
        elif typing.get_origin(current) in (dict, list):
            args = typing.get_args(current)
            current = args[-1] if args else Any
            info = None
            # constraints of Annotated[float, Field(...)] inside a container
            meta = typing.get_args(current)[1:] if typing.get_origin(current) is Annotated else ()
            if any(isinstance(m, FieldInfo) for m in meta):
                info = FieldInfo.merge_field_infos(*[m for m in meta if isinstance(m, FieldInfo)])
                info.annotation = typing.get_args(current)[0]
        else:
            return holder, None
    return holder, info


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The model whose fields a key below loc is one of (the section's own model for an empty loc)."""
    holder, _ = _field_at(model, (*loc, ""))  # "" is no field: the walk stops at the model it is looked up in
    return holder or model


def _bounds(info) -> dict:
    out = {}
    for m in getattr(info, "metadata", []) or []:
        for name in ("gt", "ge", "lt", "le"):
            if getattr(m, name, None) is not None:
                out[name] = getattr(m, name)
    return out


def _range_words(b: dict, integer: bool) -> str:
    lo = f"({b['gt']:g}" if "gt" in b else f"[{b['ge']:g}" if "ge" in b else None
    hi = f"{b['lt']:g})" if "lt" in b else f"{b['le']:g}]" if "le" in b else None
    kind = "an integer" if integer else "a number"
    if lo and hi:
        return f"{kind} in {lo}, {hi}"
    if b.get("gt") == 0:
        return "a positive integer" if integer else "a positive number"
    if b.get("ge") == 0:
        return "a count (0 or more)" if integer else "a number >= 0"
    return f"{kind} " + " and ".join(f"{ {'gt': '>', 'ge': '>=', 'lt': '<', 'le': '<='}[k]} {v:g}" for k, v in b.items())


_TYPES = {"int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
          "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
          "bool_parsing": "true or false", "string_type": "a string", "list_type": "a list",
          "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping"}


def _where(section: str, loc: tuple) -> str:
    out = section
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _lines(model: type[BaseModel], section: str, exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if p != "")
        kind, given = err["type"], err.get("input")
        # pydantic names a union's member in loc ("int", "list[str]"): drop those tags
        loc = tuple(p for p in loc if not (isinstance(p, str) and (p in ("int", "float", "str", "bool", "none")
                                                                        or "[" in p or p.startswith("function-"))))
        where = _where(section, loc)
        if kind == "extra_forbidden":
            known = sorted(_model_at(model, loc[:-1]).model_fields)
            near = difflib.get_close_matches(str(loc[-1]), known, n=1)
            lines.append(f"{where}: unknown parameter (known: {', '.join(known)})"
                         + (f"; did you mean {near[0]!r}?" if near else ""))
        elif kind == "missing":
            lines.append(f"{where}: missing")
        elif kind in _TYPES:
            lines.append(f"{where}: expected {_TYPES[kind]}, got {given!r}")
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            _, info = _field_at(model, loc)
            b = _bounds(info) or {k: v for k, v in (err.get("ctx") or {}).items()}
            annotation = getattr(info, "annotation", None)
            base = _unwrap(annotation)
            integer = base is int or (base is None and isinstance(given, int))
            nullable = type(None) in typing.get_args(annotation)
            lines.append(f"{where}: expected {_range_words(b, integer)}{' or null' if nullable else ''}, "
                         f"got {given!r}")
        elif kind == "literal_error":
            lines.append(f"{where}: expected {err['ctx']['expected'].replace(chr(39), '')}, got {given!r}")
        elif kind in ("too_short", "too_long"):
            lines.append(f"{where}: {err['msg'].lower()}, got {given!r}")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            # a model validator names its field first ("min_words: ..."): put it in the key
            head, sep, rest = msg.partition(": ")
            if sep and head.isidentifier():
                where, msg = f"{where}.{head}", rest
            lines.append(f"{where}: {msg}")
    return lines


def check_section(name: str, given: Mapping | None, model: type[BaseModel]) -> list[str]:
    """Problems of one section, one line each (empty: valid)."""
    if given is not None and not isinstance(given, Mapping):
        return [f"{name}: expected a mapping, got {given!r}"]
    try:
        model.model_validate(dict(given or {}))
    except ValidationError as exc:
        return _lines(model, name, exc)
    return []
