"""Schema helpers for the codec tests: a schema evolved by adding or dropping fields."""

from __future__ import annotations

from typing import Any

from reclaim.schemas import (
    RecordSchema,
)


def evolved(schema: RecordSchema, *, add: dict[str, Any] | None = None, drop: str | None = None) -> RecordSchema:
    """A variant of ``schema`` with a field added and/or dropped."""
    variant = schema.to_dict()
    variant["fields"] = [field for field in variant["fields"] if field["name"] != drop]
    if add is not None:
        variant["fields"].append(add)
    return RecordSchema.from_dict(variant)
