"""A fix, installed on Spark's Python workers, for PySpark 4.0's applyInPandasWithState under recent pyarrow
(4.1 and later need none: :func:`needed`).

The JVM hands each group's rows to Python with a state-info struct per row: ``startOffset`` and
``numRows`` of the group's chunk, null on padding rows. Arrow marks the children of those null
structs null too, so ``to_pandas`` widens the two int32 fields to floats, and ``RecordBatch.slice``
(pyarrow built with Cython 3) refuses floats: every batch with more rows than groups fails with
"'float' object cannot be interpreted as an integer". The fix converts the two fields back to ints
right after PySpark converts that struct column; it changes nothing when they are ints already.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

STATE_INFO_FIELDS = frozenset({"properties", "keyRowAsUnsafe", "object", "startOffset", "numRows", "isLastChunk"})
"""The fields of the state-info struct PySpark 4.0 reads its chunk offsets from."""

_MARK = "_reclaim_int_offsets"


def _int_offsets(info: Any) -> Any:
    if isinstance(info, dict):
        return {**info, "startOffset": int(info["startOffset"]), "numRows": int(info["numRows"])}
    return info


def needed() -> bool:
    """Whether this PySpark reads chunk offsets the way the fix corrects: 4.0 does; 4.1 and later convert
    the state-info struct without a per-column ``arrow_to_pandas`` and need no fix."""
    import pyspark

    return pyspark.__version__.startswith("4.0.")


def install() -> StateOffsetsFix:
    """Patch this process's ``ApplyInPandasWithStateSerializer`` once (PySpark 4.0 only); harmless when
    already patched or not needed."""
    from pyspark.sql.pandas import serializers

    if not needed():
        return StateOffsetsFix()
    # Typed as Any: the method exists on PySpark 4.0's class only, and mypy reads the installed PySpark's.
    serializer: Any = serializers.ApplyInPandasWithStateSerializer
    convert: Callable[..., Any] = serializer.arrow_to_pandas
    if not getattr(convert, _MARK, False):

        def arrow_to_pandas(self: Any, column: Any, *args: Any, **kwargs: Any) -> Any:
            converted = convert(self, column, *args, **kwargs)
            names = {field.name for field in getattr(column.type, "fields", ())}
            if names == STATE_INFO_FIELDS:
                return converted.map(_int_offsets)
            return converted

        setattr(arrow_to_pandas, _MARK, True)
        setattr(serializer, "arrow_to_pandas", arrow_to_pandas)  # noqa: B010 - a method replaced on purpose
    return StateOffsetsFix()


@dataclass(frozen=True)
class StateOffsetsFix:
    """A token whose unpickling installs the fix.

    The stateful function carries one: Spark unpickles the function on each Python worker before
    it reads the first group, which is exactly when the fix must already be in place.
    """

    def __reduce__(self) -> tuple[Callable[[], StateOffsetsFix], tuple[()]]:
        return (install, ())
