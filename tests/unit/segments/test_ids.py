"""Segment ids, transaction ids and qualified names: round trips, boundaries and malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reclaim.segments.ids import (
    MAX_INT32,
    MAX_TXN_COUNTER,
    SegmentId,
    TxnId,
    compose_segment_id,
    parse_segment_name,
    qualified_stream,
    segment_name,
    split_segment_id,
    txn_segment_name,
)
from reclaim.segments.layout import validate_segment_name
from reclaim.segments.stream_errors import MalformedNameError

INT32 = st.integers(0, MAX_INT32)
PART = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,20}", fullmatch=True)


@given(INT32, INT32)
def test_segment_id_round_trips_through_its_64_bit_value(number: int, epoch: int) -> None:
    value = compose_segment_id(number, epoch)
    assert value == epoch << 32 | number
    assert 0 <= value < 2**63  # fits an Avro long
    assert split_segment_id(value) == (number, epoch)
    assert SegmentId.from_value(value) == SegmentId(epoch=epoch, number=number)
    assert SegmentId(epoch=epoch, number=number).value == value


def test_boundaries() -> None:
    top = SegmentId(epoch=MAX_INT32, number=MAX_INT32)
    assert top.value == 2**63 - 1 - 2**31
    assert SegmentId.from_value(top.value) == top
    assert SegmentId(epoch=0, number=0).value == 0
    assert SegmentId(epoch=1, number=0).value == 2**32
    assert str(SegmentId(epoch=2, number=3)) == "3.#epoch.2"
    assert SegmentId(epoch=0, number=7).duplicate(4) == SegmentId(epoch=4, number=7)


@pytest.mark.parametrize("number, epoch", [(-1, 0), (0, -1), (2**31, 0), (0, 2**31), (True, 0), (1.0, 0)])
def test_out_of_range_parts_are_rejected(number: int, epoch: int) -> None:
    with pytest.raises(ValueError):
        SegmentId(epoch=epoch, number=number)
    with pytest.raises(ValueError):
        compose_segment_id(number, epoch)


@pytest.mark.parametrize("value", [-1, 2**31, 2**63, 2**31 << 32, 2**64])
def test_values_no_valid_pair_composes_to_are_rejected(value: int) -> None:
    with pytest.raises(ValueError):
        split_segment_id(value)


@given(INT32, st.integers(0, MAX_TXN_COUNTER))
def test_txn_id_carries_its_epoch_in_the_high_bits(epoch: int, counter: int) -> None:
    txn = TxnId(epoch, counter)
    assert txn.value >> 96 == epoch
    assert len(txn.hex) == 32 and txn.hex == txn.hex.lower()
    assert TxnId.from_hex(txn.hex) == txn == TxnId.from_value(txn.value)
    assert txn.uuid.int == txn.value


def test_txn_ids_of_one_epoch_sort_together() -> None:
    ids = sorted([TxnId(2, 1), TxnId(1, 5), TxnId(1, 2**90), TxnId(2, 0)])
    assert [t.epoch for t in ids] == [1, 1, 2, 2]
    assert sorted(t.hex for t in ids) == [t.hex for t in ids]


@given(PART, PART, INT32, INT32, st.none() | st.integers(0, MAX_TXN_COUNTER))
def test_qualified_names_round_trip(scope: str, stream: str, number: int, epoch: int, counter: int | None) -> None:
    name = segment_name(qualified_stream(scope, stream), SegmentId(epoch=epoch, number=number))
    assert name == f"{scope}/{stream}/{number}.#epoch.{epoch}"
    if counter is not None:
        name = txn_segment_name(name, TxnId(epoch, counter))
        assert name.endswith(f"#transaction.{TxnId(epoch, counter).hex}")
    parsed = parse_segment_name(name)
    assert (parsed.scope, parsed.stream, parsed.segment) == (scope, stream, SegmentId(epoch=epoch, number=number))
    assert parsed.txn == (None if counter is None else TxnId(epoch, counter))
    assert str(parsed) == name
    assert validate_segment_name(name) == name  # usable as a chunk-name prefix


@pytest.mark.parametrize("name", [
    "", "scope/stream", "scope/stream/1", "scope/stream/1.#epoch.", "scope/stream/01.#epoch.0",
    "scope/stream/1.#epoch.00", "scope/stream/-1.#epoch.0", "scope/stream/2147483648.#epoch.0",
    "scope/stream/0.#epoch.2147483648", "scope/stream/0.#epoch.99999999999", "/stream/0.#epoch.0",
    "scope//0.#epoch.0", "a/b/c/0.#epoch.0", "../stream/0.#epoch.0", "scope/_x/0.#epoch.0",
    "scope/stream/0.#epoch.0#transaction.", "scope/stream/0.#epoch.0#transaction." + "A" * 32,
    "scope/stream/0.#epoch.0#transaction." + "0" * 31, "scope/stream/0.#epoch.0#transaction." + "0" * 33,
    # A transaction id whose epoch does not fit 31 bits.
    "scope/stream/0.#epoch.0#transaction.ffffffff" + "0" * 24,
    "scope/stream/0.#epoch.0#transaction." + "0" * 32 + "#transaction." + "0" * 32,
    "scope/stream/0.#epoch.0 ", "scope/st ream/0.#epoch.0", "scope/stream/0.#epoch.0\n",
])
def test_malformed_names_are_rejected_with_a_clear_error(name: str) -> None:
    with pytest.raises(MalformedNameError, match="scope/stream|hex|epoch|transaction|not"):
        parse_segment_name(name)


@given(st.text(max_size=80))
def test_parsing_arbitrary_text_either_round_trips_or_raises_malformed(text: str) -> None:
    try:
        parsed = parse_segment_name(text)
    except MalformedNameError:
        return
    assert str(parsed) == text


def test_a_transaction_segment_cannot_have_a_transaction() -> None:
    txn = TxnId(0, 1)
    name = txn_segment_name("s/t/0.#epoch.0", txn)
    with pytest.raises(MalformedNameError, match="transaction segment already"):
        txn_segment_name(name, txn)


@pytest.mark.parametrize("scope, stream", [("", "s"), ("s", ""), ("a/b", "c"), ("s", "#x"), ("-s", "t")])
def test_bad_scope_or_stream_names_are_rejected(scope: str, stream: str) -> None:
    with pytest.raises(MalformedNameError):
        qualified_stream(scope, stream)
