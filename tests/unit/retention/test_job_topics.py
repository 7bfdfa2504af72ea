"""The retention job's step for plain Kafka topics (consumption retention of topics), without a Spark session: the
admin's policy and the poller's signed cuts in, DeleteRecords decisions out, signed by the job; forged inputs
refused; the topic's state kept in its bucket beside streams'."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from pyspark.sql.streaming.state import GroupState

from reclaim.retention.buckets import bucket_of, decode_bucket
from reclaim.retention.spark_auth import job_keys
from reclaim.retention.spark_io import DEFAULT_BUCKETS, INPUT_COLUMNS, TOPIC_ENTRY
from reclaim.retention.spark_state import stream_retention_step
from reclaim.schemas import build_codec, millis_now
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.rejects import RejectKind
from reclaim.schemas.streams import StreamCut
from reclaim.schemas.topic_retention import (
    GroupCommit,
    TopicCut,
    TopicPartitionState,
    TopicRetentionPolicy,
    TopicTruncation,
)
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.rules import signers_of
from reclaim.security.signing import H_KEY_ID, H_SIGNATURE, AuthMode, RecordSigner, RecordVerifier
from tests.support.spark_io import REEVALUATE_MS, TOPICS, group_state, rejects

TOPIC = "orders"
BUCKET = bucket_of(TOPIC, DEFAULT_BUCKETS)
KEYS = Keyring([new_key("admin-1", "admin", Algorithm.ED25519), new_key("job-1", "retention-job", Algorithm.ED25519),
                new_key("poll-1", "topic-retention", Algorithm.ED25519),
                new_key("billing-1", "subscriber", Algorithm.ED25519, subject="billing")])
ADMIN, POLLER = RecordSigner(KEYS, "admin"), RecordSigner(KEYS, "topic-retention")
SUBSCRIBER = RecordSigner(KEYS, "subscriber", "billing")
ENFORCE = job_keys(KEYS, AuthMode.ENFORCE)
T0 = millis_now() - 60_000
POLICY = TopicRetentionPolicy(TOPIC, "id-1", ("billing", "audit"), 0, T0)


def observed(at: int, billing: dict[int, int], audit: dict[int, int], topic: str = TOPIC) -> TopicCut:
    return TopicCut(topic, "id-1", at, (TopicPartitionState(0, 0, 100), TopicPartitionState(1, 0, 100)),
                    (GroupCommit("billing", "stable", StreamCut.from_mapping(billing)),
                     GroupCommit("audit", "empty", StreamCut.from_mapping(audit))))


def rows(items: Sequence[tuple[AvroRecord, RecordSigner | None]], key: str = TOPIC) -> pd.DataFrame:
    codec = build_codec()
    out = []
    for offset, (record, signer) in enumerate(items):
        topic = TOPICS.topic_policies if isinstance(record, TopicRetentionPolicy) else TOPICS.topic_cuts
        assert topic is not None
        value = codec.encode(record, topic)
        key_id = signature = None
        if signer is not None:
            (_, key_id), (_, signature) = signer.headers(topic, key.encode(), value)
        out.append({"bucket": BUCKET, "stream": key, "rank": TOPICS.rank(topic), "kafka_ts": millis_now(),
                    "topic": topic, "partition": 0, "offset": offset, "key": key.encode(), "value": value,
                    "key_id": key_id, "signature": signature})
    return pd.DataFrame(out, columns=list(INPUT_COLUMNS))


def run(frame: pd.DataFrame, previous: GroupState | None = None) -> tuple[pd.DataFrame, GroupState]:
    state = group_state(millis_now(), previous)
    step = stream_retention_step(TOPICS, None, REEVALUATE_MS, keys=ENFORCE)
    return pd.concat(list(step((BUCKET,), [frame], state)), ignore_index=True), state


def decisions(out: pd.DataFrame) -> list[TopicTruncation]:
    codec = build_codec()
    return [codec.decode(row.value, row.topic, TopicTruncation) for row in out[out.outcome == "truncation"]
            .itertuples()]


def test_the_policy_and_the_pollers_cut_make_a_signed_delete_records_decision_kept_forward_only() -> None:
    out, state = run(rows([(POLICY, ADMIN), (observed(T0 + 1, {0: 40, 1: 90}, {0: 60, 1: 30}), POLLER)]))
    assert rejects(out) == []
    [decision] = decisions(out)
    assert (decision.topic, decision.topic_id, decision.starts.as_dict()) == (TOPIC, "id-1", {0: 40, 1: 30})
    assert dict(decision.why) == {"0": "AT_BOUND held by billing", "1": "AT_BOUND held by audit"}
    [row] = out[out.outcome == "truncation"].itertuples()
    assert row.topic == TOPICS.topic_truncation and row.key == TOPIC.encode()
    applier = RecordVerifier(Keyring(key.public_only() for key in KEYS))
    signer = applier.verify(row.topic, row.key, row.value, [(H_KEY_ID, row.key_id), (H_SIGNATURE, row.signature)],
                            signers_of(TopicTruncation))
    assert (signer.key_id, signer.role) == ("job-1", "retention-job")  # type: ignore[union-attr]
    assert set(decode_bucket(state.get[0])) == {TOPIC_ENTRY + TOPIC}
    # The next batch: only what moved on is decided again.
    out, state = run(rows([(observed(T0 + 2, {0: 40, 1: 90}, {0: 60, 1: 70}), POLLER)]), state)
    assert [d.starts.as_dict() for d in decisions(out)] == [{1: 70}]
    out, _ = run(rows([(observed(T0 + 3, {0: 40, 1: 90}, {0: 60, 1: 70}), POLLER)]), state)
    assert decisions(out) == []


def test_forged_policies_and_cuts_are_refused_and_change_nothing() -> None:
    _, state = run(rows([(POLICY, ADMIN)]))
    moved = observed(T0 + 1, {0: 100, 1: 100}, {0: 100, 1: 100})
    generous = TopicRetentionPolicy(TOPIC, "id-1", (), 0, T0 + 1, max_ms=0)
    forged = [(moved, None), (moved, ADMIN), (moved, SUBSCRIBER), (generous, POLLER), (generous, None)]
    out, state = run(rows(forged), state)
    assert [r.kind for r in rejects(out)] == [RejectKind.UNAUTHENTICATED] * 5
    assert decisions(out) == []
    # A genuine cut keyed by another topic than it names is refused too.
    out, _ = run(rows([(observed(T0 + 2, {0: 5, 1: 5}, {0: 5, 1: 5}, topic="payments"), POLLER)]), state)
    assert [r.kind for r in rejects(out)] == [RejectKind.UNDECODABLE] and decisions(out) == []
