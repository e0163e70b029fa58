"""What a job class may be: a dataclass, a msgspec Struct or a Pydantic (v2) model; its fields,
which of them a value must be given, and the types they hold.

The rest of the queue asks here rather than about one kind of class, so a kind reads alike
whichever it is. Pydantic is imported by the application, never by nilo-job: a class is a
Pydantic model when it has a model's own attributes.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any


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
