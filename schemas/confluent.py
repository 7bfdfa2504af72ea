"""The Confluent wire format (magic byte 0, 4-byte schema id, Avro body) through Schema Registry."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, overload

from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    SchemaRegistryError,
    dual_schema_id_deserializer,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError
from fastavro.read import SchemaResolutionError

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.catalog import SchemaCatalog, check_expected, message_bytes, record_datum
from reclaim.schemas.errors import DecodeReason, EncodeReason, RecordDecodeError, RecordEncodeError, SchemaError

R = TypeVar("R", bound=AvroRecord)

_AVRO = "AVRO"
# Errors of the serializers and fastavro that mean the data, not the registry, is wrong.
_DATA_ERRORS = (
    SerializationError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    OverflowError,
    EOFError,
    struct.error,
)
_NOT_FOUND = 404


def _registry_failure(exc: Exception) -> tuple[bool, str]:
    """Whether a registry call's failure may pass on retry, and how to describe it."""
    if isinstance(exc, SchemaRegistryError):
        # 4xx answers (not found, incompatible, unauthorized) repeat on retry; 5xx may not.
        return exc.http_status_code >= 500 or exc.http_status_code < 0, str(exc)
    # Anything else from the HTTP stack (refused, timed out, TLS) is the registry being away.
    return True, f"{type(exc).__name__}: {exc}"


class ConfluentCodec:
    """Confluent Schema Registry framing, with subjects named ``<topic>-value``.

    Encoding registers (or looks up) the record type's schema under the topic's subject and
    prefixes its id. Decoding reads the id, fetches the writer schema, picks the record type
    from its full name and resolves it into that type's catalog schema, so evolution works as in
    the single-object codec, with the registry as the store of writer schemas.

    Parameters
    ----------
    client : SchemaRegistryClient
        The registry; ``SchemaRegistryClient.new_client({"url": "mock://x"})`` is in-memory.
    catalog : SchemaCatalog, optional
        Record types and schemas; the packaged ones by default.
    auto_register : bool
        Register the writer schema when the subject lacks it (else it must already be there).
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        *,
        catalog: SchemaCatalog | None = None,
        auto_register: bool = True,
    ) -> None:
        self.client = client
        self.catalog = catalog if catalog is not None else SchemaCatalog()
        self._auto_register = auto_register
        self._serializers: dict[type[AvroRecord], AvroSerializer] = {}
        self._deserializers: dict[type[AvroRecord], AvroDeserializer] = {}
        self._writer_names: dict[tuple[int | None, str | None], str] = {}

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        registry_config: Mapping[str, Any] | None = None,
        catalog: SchemaCatalog | None = None,
        auto_register: bool = True,
    ) -> ConfluentCodec:
        """Build with a new registry client for ``url`` (``mock://...`` gives an in-memory one)."""
        client = SchemaRegistryClient.new_client({**(registry_config or {}), "url": url})
        return cls(client, catalog=catalog, auto_register=auto_register)

    def encode_all(self, records: Sequence[AvroRecord], topic: str) -> list[bytes]:
        """``encode`` of each of ``records``, in order."""
        return [self.encode(record, topic) for record in records]

    def encode(self, record: AvroRecord, topic: str) -> bytes:
        """Encode ``record`` in Confluent framing for ``topic``.

        Raises
        ------
        RecordEncodeError
            ``NOT_A_RECORD``, ``INVALID_RECORD``, ``REGISTRY_REJECTED`` (e.g. an incompatible
            schema) or ``REGISTRY_UNAVAILABLE`` (retryable).
        """
        schema = self.catalog.schema_for(type(record))
        datum = record_datum(record, schema)
        serializer = self._serializer(type(record), schema)
        try:
            data = serializer(datum, SerializationContext(topic, MessageField.VALUE))
        except _DATA_ERRORS as exc:
            raise RecordEncodeError(EncodeReason.INVALID_RECORD, f"{schema.name}: {exc}") from exc
        except Exception as exc:
            # The HTTP stack's errors (refused, timed out) share no base class we can import, so
            # whatever is not a data error is a registry failure; _registry_failure classifies it.
            retryable, detail = _registry_failure(exc)
            reason = EncodeReason.REGISTRY_UNAVAILABLE if retryable else EncodeReason.REGISTRY_REJECTED
            raise RecordEncodeError(reason, f"{schema.name} on {topic}: {detail}") from exc
        if data is None:
            raise RecordEncodeError(EncodeReason.INVALID_RECORD, f"{schema.name}: serializer returned nothing")
        return data

    @overload
    def decode(self, data: bytes, topic: str) -> AvroRecord: ...

    @overload
    def decode(self, data: bytes, topic: str, expected_type: type[R]) -> R: ...

    def decode(self, data: bytes, topic: str, expected_type: type[R] | None = None) -> AvroRecord:
        """Decode Confluent-framed bytes read from ``topic``.

        Raises
        ------
        RecordDecodeError
            For every malformed input; ``REGISTRY_UNAVAILABLE`` is the one retryable reason.
        """
        raw = message_bytes(data)
        ctx = SerializationContext(topic, MessageField.VALUE)
        record_type = self.catalog.type_named(self._writer_name(raw, ctx))
        check_expected(record_type, expected_type)
        deserializer = self._deserializer(record_type)
        try:
            datum = deserializer(raw, ctx)
        except SchemaResolutionError as exc:
            raise RecordDecodeError(DecodeReason.SCHEMA_MISMATCH, str(exc)) from exc
        except _DATA_ERRORS as exc:
            raise RecordDecodeError(DecodeReason.MALFORMED_BODY, f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # a registry failure, as in encode
            raise self._registry_decode_error(exc) from exc
        return record_type.from_avro(datum)

    def _writer_name(self, raw: bytes, ctx: SerializationContext) -> str:
        """The full record name of the writer schema the framing points at."""
        schema_id = SchemaId(_AVRO)
        try:
            dual_schema_id_deserializer(raw, ctx, schema_id)
        except SerializationError as exc:
            raise RecordDecodeError(DecodeReason.BAD_MARKER, str(exc)) from exc
        except (struct.error, ValueError, TypeError, EOFError, IndexError) as exc:
            raise RecordDecodeError(DecodeReason.TRUNCATED, f"{len(raw)} bytes: {exc}") from exc
        guid = None if schema_id.guid is None else str(schema_id.guid)
        key = (schema_id.id, guid)
        if key not in self._writer_names:
            self._writer_names[key] = self._fetch_writer(schema_id.id, guid).name
        return self._writer_names[key]

    def _fetch_writer(self, schema_id: int | None, guid: str | None) -> RecordSchema:
        try:
            if schema_id is not None:
                registered = self.client.get_schema(schema_id)
            else:
                registered = self.client.get_schema_by_guid(str(guid))
        except Exception as exc:  # a registry failure, as in encode
            raise self._registry_decode_error(exc) from exc
        if registered.schema_str is None:
            raise RecordDecodeError(DecodeReason.UNKNOWN_SCHEMA, f"schema {schema_id or guid} has no text")
        try:
            return RecordSchema.from_json(registered.schema_str)
        except SchemaError as exc:
            raise RecordDecodeError(DecodeReason.UNKNOWN_SCHEMA, f"schema {schema_id or guid}: {exc}") from exc

    @staticmethod
    def _registry_decode_error(exc: Exception) -> RecordDecodeError:
        if isinstance(exc, SchemaRegistryError) and exc.http_status_code == _NOT_FOUND:
            return RecordDecodeError(DecodeReason.UNKNOWN_SCHEMA, str(exc))
        retryable, detail = _registry_failure(exc)
        reason = DecodeReason.REGISTRY_UNAVAILABLE if retryable else DecodeReason.UNKNOWN_SCHEMA
        return RecordDecodeError(reason, detail)

    def _serializer(self, record_type: type[AvroRecord], schema: RecordSchema) -> AvroSerializer:
        serializer = self._serializers.get(record_type)
        if serializer is None:
            conf = {
                "auto.register.schemas": self._auto_register,
                "subject.name.strategy": topic_subject_name_strategy,
            }
            serializer = AvroSerializer(self.client, schema.text, conf=conf)
            self._serializers[record_type] = serializer
        return serializer

    def _deserializer(self, record_type: type[AvroRecord]) -> AvroDeserializer:
        deserializer = self._deserializers.get(record_type)
        if deserializer is None:
            reader = self.catalog.schema_for(record_type)
            conf = {"subject.name.strategy": topic_subject_name_strategy}
            deserializer = AvroDeserializer(self.client, reader.text, conf=conf)
            self._deserializers[record_type] = deserializer
        return deserializer
