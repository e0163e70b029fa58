"""The payload codec: a kind's dataclass to JSON bytes at push, and back on a worker.

msgspec does the encoding and the typed decoding (it is the fastest maintained codec that checks
types on the way in). On top of it this module promises what a payload must keep: what is
pushed is what `run` gets. A field whose type cannot travel through JSON is refused when the queue
is built, and a value that would not come back equal (NaN, a str in an int field) is refused at
push with a sentence naming the field, before anything is written.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import msgspec

from .._base.errors import BadPayload, Refusal

_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")


def _unwritable(value: object, path: str) -> tuple[str, object] | None:
    """Where in `value` (named `path`) the first part that msgspec cannot write is, and that
    part: `("Note.items[1]", <object>)`; None when every part writes on its own."""
    parts: list[tuple[str, object]]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [(f"{path}.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    elif isinstance(value, msgspec.Struct):
        parts = [(f"{path}.{name}", getattr(value, name)) for name in value.__struct_fields__]
    elif isinstance(value, Mapping):
        parts = [(f"{path}[{key!r}]", key) for key in value]
        parts += [(f"{path}[{key!r}]", item) for key, item in value.items()]
    elif isinstance(value, list | tuple | set | frozenset):
        parts = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    else:
        return path, value
    for where, part in parts:
        try:
            msgspec.json.encode(part)
        except Exception:
            return _unwritable(part, where)
    return None


def _a(noun: str) -> str:
    """`noun` with its indefinite article: "an object", "a set"."""
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


class Codec:
    """Encodes and decodes the payload of one kind's class `cls`.

    Raises (at construction):
        Refusal: a field's type cannot round-trip through JSON; the message names the field.
    """

    __slots__ = ("_own_eq", "_read", "_write", "cls", "model")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.model = is_pydantic(cls)  # a Pydantic model writes and reads its own JSON
        _check_fields(cls)
        # The encoder's and decoder's own methods, called with no function of ours around them
        # (a push makes both calls).
        self._write: Callable[[object], bytes] = (
            _dump_model if self.model else msgspec.json.Encoder().encode
        )
        self._read: Callable[[bytes], Any] = (
            cls.model_validate_json  # type: ignore[attr-defined]
            if self.model
            else msgspec.json.Decoder(cls).decode
        )
        self._own_eq = _has_own_eq(cls)  # see _equal

    def encode(self, value: object) -> bytes:
        """The JSON of `value`, checked to decode back to an equal value.

        Raises:
            Refusal: `value` cannot be encoded, or would not come back as it went in.
        """
        name = self.cls.__name__
        try:
            data = self._write(value)
        except UnicodeEncodeError as error:
            raise Refusal(
                f"{name} holds text that is not valid Unicode ({error.reason}: "
                f"{error.object[error.start : error.end]!a}), which no store can keep: a str "
                "read from a file name or the OS may need os.fsencode(...).decode(errors=...) "
                "first; nothing was pushed"
            ) from None
        except RecursionError:
            raise Refusal(_too_deep(name, None)) from None
        except Exception as error:  # whatever a field's value does when it is written
            found = None if self.model else _unwritable(value, name)
            if found is None:
                raise Refusal(
                    f"{name} cannot be written as JSON: {error}; nothing was pushed"
                ) from None
            path, bad = found
            raise Refusal(
                f"{path} holds {_a(type(bad).__name__)}, which cannot be written as JSON "
                f"({error}): give it a value JSON can carry (text, numbers, lists, dicts, or a "
                "dataclass of them), or convert it first; nothing was pushed"
            ) from None
        if data.count(b"[") + data.count(b"{") > MAX_DEPTH and (depth := _depth(data)) > MAX_DEPTH:
            raise Refusal(_too_deep(name, depth))
        # The common case costs a decode and an ==; the reasons are looked for only on failure.
        try:
            back = self._read(data)
        except msgspec.ValidationError as error:
            raise Refusal(self._why(value, _explain(name, str(error)))) from None
        except Exception as error:  # a Pydantic ValidationError among them
            if self.model:
                raise Refusal(self._why(value, _model_error(name, error))) from None
            raise Refusal(
                f"{name} would not come back from JSON ({error}); nothing was pushed"
            ) from None
        try:
            equal = bool(back == value) if self._own_eq else _equal(back, value)
        except Exception as error:  # Decimal("sNaN") == anything raises, for one
            raise Refusal(
                f"{name} holds a value that cannot be compared with what comes back from JSON "
                f"({type(error).__name__}), so it cannot be checked: nothing was pushed"
            ) from None
        if not equal:
            raise Refusal(self._why(value, _difference(name, back, value))) from None
        return data

    def _why(self, value: object, otherwise: str) -> str:
        """Why `value` cannot be pushed: a float that is not finite (JSON writes it as null, so
        the decode fails or differs) is named first; else `otherwise`."""
        plain_value = (
            value.model_dump()  # type: ignore[attr-defined]
            if self.model
            else msgspec.to_builtins(value)
        )
        where = _non_finite(plain_value, self.cls.__name__)
        if where is not None:
            otherwise = (
                f"{where} holds a float that is not finite (NaN or infinity), which JSON cannot "
                "carry: store None or a sentinel instead"
            )
        return otherwise + "; nothing was pushed"

    def decode(self, data: bytes) -> Any:
        """The value `data` encodes.

        Raises:
            BadPayload: `data` is not JSON that fits the class, whatever the reason (a field
                renamed, a type changed, text that is not UTF-8, nesting too deep to read).
        """
        try:
            return self._read(data)
        except Exception as error:  # RecursionError and the like too: a row, not the worker
            raise BadPayload(
                f"its payload no longer fits {self.cls.__name__} ({type(error).__name__}: {error})"
            ) from None


MAX_DEPTH = 256
"""The deepest nesting of arrays and objects a payload may have. How deep a worker can read
depends on its Python (3.11 stops near its recursion limit of 1,000; 3.12 and later count a C
limit of their own), so a payload pushed by one process could be deeper than a worker elsewhere
can read: such a value is refused at push, well inside every version's limit."""


def _too_deep(name: str, depth: int | None) -> str:
    how = "" if depth is None else f" ({depth} levels)"
    return (
        f"{name} nests lists and dicts too deeply{how}: a payload may nest at most {MAX_DEPTH} "
        "levels, so that every worker can read it back; nothing was pushed"
    )


def _depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON `data` (brackets in strings do not
    count)."""
    deepest = depth = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def plain(payload: bytes) -> Any:
    """A stored payload as plain JSON values (dicts, lists, str, numbers), for an operator: what a
    row holds whether or not it still fits its class; text that is not JSON comes back as a str.
    """
    try:
        return msgspec.json.decode(payload)
    except Exception:  # not JSON, not UTF-8, too deep: the text, as it can be shown
        return payload.decode(errors="replace")


def _dump_model(value: object) -> bytes:
    """A Pydantic model's JSON; a value of the wrong type (made with model_construct) is an
    error, not a warning."""
    dumped: str = value.model_dump_json(warnings="error")  # type: ignore[attr-defined]
    return dumped.encode()


def _has_own_eq(cls: type[object]) -> bool:
    return cls.__eq__ is not object.__eq__


def _equal(back: object, value: object) -> bool:
    """Whether what came back from JSON equals what was pushed: by the class's own `==` when
    it has one (dataclasses and Structs compare field by field, types included, so a datetime
    that came back as a str is not equal), else by the plain JSON values."""
    if _has_own_eq(type(value)):
        return bool(back == value)
    return bool(msgspec.to_builtins(back) == msgspec.to_builtins(value))


def _difference(name: str, back: object, value: object) -> str:
    """A sentence naming the first field that did not come back as it went."""
    for field in field_names(type(value)):
        went, came = getattr(value, field, None), getattr(back, field, None)
        if went != came:
            return (
                f"{name}.{field} would not come back from JSON as it was pushed: "
                f"{type(went).__name__} {went!r} would arrive as {type(came).__name__} "
                f"{came!r}; give the field a type that says what it holds (not Any), or "
                "convert the value first"
            )
    return f"{name} would not come back from JSON as it was pushed: check each field's value"


def _model_error(name: str, error: Exception) -> str:
    """A Pydantic ValidationError on the way back as a sentence naming the first field."""
    errors = getattr(error, "errors", None)
    found = errors() if callable(errors) else []
    if found:
        first = found[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"{name}.{where} would not come back from JSON: {first.get('msg', error)}"
    return f"{name} would not come back from JSON ({error})"


def _explain(name: str, message: str) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.user_id`" as "SendWelcome.user_id: …"."""
    match = _PATH.search(message)
    if match is None:
        return f"{name}: {message}"
    what = message[: match.start()].replace("`", "")
    what = what[:1].lower() + what[1:]
    return f"{name}{match['path']}: {what}"


def _non_finite(value: object, path: str) -> str | None:
    """The path of the first non-finite float in a tree of plain values, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            if (found := _non_finite(item, f"{path}.{key}")) is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if (found := _non_finite(item, f"{path}[{index}]")) is not None:
                return found
    return None


def _check_fields(cls: type) -> None:
    """Refuse, naming the field, a dataclass field whose type msgspec cannot decode."""
    name = cls.__name__
    try:
        types_of = hints(cls)
    except Exception as error:
        raise Refusal(
            f"{name}'s field annotations cannot be resolved ({type(error).__name__}: {error}): "
            "import every type a field names in the module that defines the class"
        ) from None
    for field in field_names(cls):
        hint = types_of.get(field, Any)
        bad = _unsupported(hint, set())
        if bad is not None:
            shown = getattr(bad, "__qualname__", None) or repr(bad).replace("typing.", "")
            raise Refusal(
                f"{name}.{field} holds a {shown}, which cannot travel through JSON to a worker "
                "(possibly in another process): carry its id or its data as str, int, float, "
                "bool, an enum, a list, a dict with str keys, a dataclass, datetime, date, UUID, "
                "Decimal or bytes, and look the rest up in run"
            ) from None
    if is_pydantic(cls):
        return  # Pydantic checks its own fields as the class is made
    try:
        msgspec.json.Decoder(cls)
    except TypeError as error:
        raise Refusal(f"{name} cannot be read back from JSON: {error}") from None


_PLAIN = (str, int, float, bool, bytes, bytearray, datetime, date, time, timedelta, UUID, Decimal)


def _unsupported(hint: Any, seen: set[int]) -> Any:
    """The first type inside `hint` that cannot round-trip through JSON, or None.

    msgspec would accept any class as a custom type and fail only when a value is encoded, so
    the types are walked here: plain values, enums, dataclasses and msgspec Structs (their
    fields in turn), containers of those, Optional/Union, Literal and Any.
    """
    if hint is Any or hint is object or hint is None or hint is type(None):
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return None
    if origin is typing.Annotated:
        return _unsupported(typing.get_args(hint)[0], seen)
    if origin is not None:
        if origin in (list, tuple, set, frozenset, dict, typing.Union, types.UnionType) or (
            isinstance(origin, type)
            and issubclass(origin, Sequence | Mapping | AbstractSet)
            and not issubclass(origin, str | bytes)
        ):
            for arg in typing.get_args(hint):
                if arg is not Ellipsis and (bad := _unsupported(arg, seen)) is not None:
                    return bad
            return None
        return hint
    if not isinstance(hint, type):
        return hint
    if issubclass(hint, _PLAIN) or issubclass(hint, enum.Enum):
        return None
    if hint in (list, tuple, set, frozenset, dict):
        return None
    if is_record(hint) or _is_typed_record(hint):
        if id(hint) in seen:
            return None
        seen.add(id(hint))
        try:
            nested = hints(hint)
        except Exception:
            return hint
        for field_hint in nested.values():
            if typing.get_origin(field_hint) is typing.ClassVar:
                continue
            if (bad := _unsupported(field_hint, seen)) is not None:
                return bad
        return None
    return hint


def _is_typed_record(hint: type) -> bool:
    """A NamedTuple or a TypedDict, which msgspec encodes field by field."""
    return (issubclass(hint, tuple) and hasattr(hint, "_fields")) or typing.is_typeddict(hint)


def is_pydantic(cls: object) -> bool:
    """Whether `cls` is a Pydantic v2 model class."""
    return (
        isinstance(cls, type)
        and hasattr(cls, "__pydantic_fields__")
        and hasattr(cls, "model_validate_json")
        and hasattr(cls, "model_dump_json")
    )


def is_record(cls: object) -> bool:
    """Whether `cls` is a class whose fields can be a payload (dataclass, Struct, Pydantic)."""
    return isinstance(cls, type) and (
        dataclasses.is_dataclass(cls) or hasattr(cls, "__struct_fields__") or is_pydantic(cls)
    )


def field_names(cls: type) -> list[str]:
    """The names of the fields of the record class `cls`, in order."""
    if dataclasses.is_dataclass(cls):
        return [field.name for field in dataclasses.fields(cls)]
    if is_pydantic(cls):
        return list(cls.__pydantic_fields__)  # type: ignore[attr-defined]
    return list(getattr(cls, "__struct_fields__", ()))


def required(cls: type) -> list[str]:
    """The fields of `cls` that have no default: a value must be given them."""
    if dataclasses.is_dataclass(cls):
        return [
            field.name
            for field in dataclasses.fields(cls)
            if field.init
            and field.default is dataclasses.MISSING
            and field.default_factory is dataclasses.MISSING
        ]
    if is_pydantic(cls):
        fields = cls.__pydantic_fields__  # type: ignore[attr-defined]
        return [name for name, info in fields.items() if info.is_required()]
    names: tuple[str, ...] = tuple(getattr(cls, "__struct_fields__", ()))
    return list(names[: len(names) - len(getattr(cls, "__struct_defaults__", ()))])


def hints(cls: type) -> dict[str, Any]:
    """The type each field of `cls` holds, by name.

    Raises:
        NameError, TypeError: an annotation cannot be resolved (the caller says so).
    """
    if is_pydantic(cls):
        fields = cls.__pydantic_fields__  # type: ignore[attr-defined]
        return {name: info.annotation for name, info in fields.items()}
    return typing.get_type_hints(cls)
