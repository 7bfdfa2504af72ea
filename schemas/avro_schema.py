"""One Avro record schema with its parsing canonical form and CRC-64-AVRO fingerprint."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fastavro.repository import SchemaRepositoryError
from fastavro.schema import (
    SchemaParseException,
    UnknownType,
    fingerprint,
    load_schema,
    parse_schema,
    to_parsing_canonical_form,
)
from fastavro.types import Schema

from reclaim.schemas.errors import SchemaError

AVRO_DIR = Path(str(resources.files("reclaim.schemas") / "avro"))
"""The directory of the packaged ``.avsc`` files, one per named record, ``reclaim.<Name>.avsc``."""

FINGERPRINT_ALGORITHM = "CRC-64-AVRO"


@dataclass(frozen=True)
class RecordSchema:
    """An Avro record schema, self-contained, with its identity for single-object encoding.

    Two schemas are equal when their parsing canonical forms are, so doc changes do not count.

    Attributes
    ----------
    name : str
        The record's full name, e.g. ``"reclaim.StreamCut"``.
    text : str
        The schema as standalone JSON text (named types defined inline, defaults and docs kept),
        the text a schema registry stores.
    canonical_form : str
        The schema's Parsing Canonical Form.
    fingerprint : bytes
        The 8-byte CRC-64-AVRO fingerprint of ``canonical_form``, in the little-endian byte order
        the single-object encoding header uses.
    parsed : Schema
        fastavro's parsed schema, for its readers and writers.
    plain : Schema
        The same schema without its logical types, parsed: what a reader of bodies written with this
        very schema reads a ``timestamp-millis`` with as the long it is (every record type takes the
        long, and fastavro's datetime cost a conversion each way, a tenth of a record's decoding).
    """

    name: str
    text: str = field(compare=False, repr=False)
    canonical_form: str = field(repr=False)
    fingerprint: bytes
    parsed: Schema = field(compare=False, repr=False)
    plain: Schema = field(compare=False, repr=False)

    @classmethod
    def from_dict(cls, schema: dict[str, Any]) -> RecordSchema:
        """Build from a self-contained schema given as a JSON-like dict.

        Raises
        ------
        SchemaError
            If the schema is not valid Avro or is not a record.
        """
        try:
            parsed = parse_schema(schema)
            canonical = to_parsing_canonical_form(parsed)
            text = json.dumps(schema)
            plain = parse_schema(_without_logical_types(schema))
        except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError) as exc:
            raise SchemaError(f"invalid Avro schema: {exc}") from exc
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            raise SchemaError(f"not an Avro record schema: {canonical}")
        # fastavro's hex string is already in the little-endian order the header uses.
        digest = bytes.fromhex(fingerprint(canonical, FINGERPRINT_ALGORITHM))
        return cls(str(parsed["name"]), text, canonical, digest, parsed, plain)

    @classmethod
    def from_json(cls, text: str) -> RecordSchema:
        """Build from self-contained schema JSON text (e.g. as a schema registry returns it).

        Raises
        ------
        SchemaError
            If the text is not JSON, not valid Avro, or not a record.
        """
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise SchemaError(f"schema is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise SchemaError("schema JSON is not an object")
        return cls.from_dict(obj)

    @classmethod
    def load(cls, full_name: str, directory: Path = AVRO_DIR) -> RecordSchema:
        """Load ``<directory>/<full_name>.avsc``, resolving named types from sibling files.

        Parameters
        ----------
        full_name : str
            The record's full name, e.g. ``"reclaim.PendingDeleteLedgerInfo"``.
        directory : Path
            Where the ``.avsc`` files are; the packaged ones by default.

        Raises
        ------
        SchemaError
            If a file is missing or invalid.
        """
        path = directory / f"{full_name}.avsc"
        try:
            # _write_hint=False (documented in load_schema's docstring) returns the plain
            # schema with referenced files inlined, without fastavro's private marker keys,
            # which is the standalone JSON a registry and other languages expect.
            expanded = load_schema(str(path), _write_hint=False)
        except (OSError, SchemaRepositoryError, SchemaParseException, UnknownType, ValueError) as exc:
            raise SchemaError(f"cannot load schema {full_name} from {directory}: {exc}") from exc
        if not isinstance(expanded, dict):
            raise SchemaError(f"schema file {path} is not a record schema")
        return cls.from_dict(expanded)

    @property
    def fingerprint_hex(self) -> str:
        """The fingerprint as hex, in header byte order, for messages and logs."""
        return self.fingerprint.hex()

    def to_dict(self) -> dict[str, Any]:
        """A fresh copy of the schema as a JSON-like dict, e.g. to derive an evolved variant."""
        copy: dict[str, Any] = json.loads(self.text)
        return copy


def _without_logical_types(schema: Any) -> Any:
    """A copy of a schema (JSON-like) with every ``logicalType`` left out: each such type read as its base type."""
    if isinstance(schema, dict):
        return {key: _without_logical_types(value) for key, value in schema.items() if key != "logicalType"}
    if isinstance(schema, list):
        return [_without_logical_types(item) for item in schema]
    return schema
