"""The retention job's record authentication, through its per-stream step: forged inputs are refused and change
nothing, truncation events carry the job's signature, and the keys that reach executors are public ones."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client import REGISTRY
from pyspark.sql.streaming.state import GroupState

from reclaim.producers.topics import TopicNames
from reclaim.retention.buckets import bucket_of, decode_bucket
from reclaim.retention.spark_auth import JobKeys, job_keys
from reclaim.retention.spark_io import DEFAULT_BUCKETS, INPUT_COLUMNS, UNDECODABLE_BUCKET, RetentionTopics
from reclaim.retention.spark_state import stream_retention_step
from reclaim.schemas import LimitType, RetentionPolicy, RetentionType, build_codec, millis_now
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.rejects import RejectKind
from reclaim.schemas.streams import StreamConfig, StreamCutRecord, TruncationEvent
from reclaim.schemas.subscribers import SubscriberChange, SubscriberCut
from reclaim.schemas.topology import StreamTopology, TopologyEpoch, TopologySegment, TopologyState
from reclaim.security.errors import SigningError
from reclaim.security.keyring import Algorithm, Keyring, KeyStatus, new_key, parse_keyring
from reclaim.security.rules import signers_of
from reclaim.security.signing import H_KEY_ID, H_SIGNATURE, AuthMode, RecordSigner, RecordVerifier
from reclaim.services.retention_job import RetentionJobSettings, executor_keys
from tests.support.spark_io import REEVALUATE_MS, TOPICS, events, group_state, key_of, rejects
from tests.support.spark_job import (
    CONSUMPTION,
    MINUTE_MS,
    STREAM,
    at,
    config,
    consumed,
    recorded,
    stream_with,
    subscribe,
    unsubscribe,
)

BUCKET = bucket_of(STREAM, DEFAULT_BUCKETS)
PAYMENTS = "scope/payments"
"""Another CONSUMPTION stream, which no subscriber key here is granted."""
BILLING_OLD = replace(new_key("billing-1", "subscriber", Algorithm.ED25519, subject="billing", streams=[STREAM]),
                      status=KeyStatus.RETIRED)
KEYS = Keyring([
    new_key("ctl-1", "controller", Algorithm.ED25519), new_key("ctl-1.deletes", "controller", Algorithm.HMAC_SHA256),
    new_key("admin-1", "admin", Algorithm.ED25519), new_key("job-1", "retention-job", Algorithm.ED25519),
    new_key("job-0", "retention-job", Algorithm.HMAC_SHA256), BILLING_OLD,
    new_key("billing-2", "subscriber", Algorithm.ED25519, subject="billing", streams=["scope/*"]),
    new_key("audit-1", "subscriber", Algorithm.ED25519, subject="audit", streams=[STREAM]),
])
"""What the signers hold between them; the job gets public halves of these and its own key. billing is granted
every stream of scope ``scope`` by pattern, audit only STREAM."""
CONTROLLER, ADMIN = RecordSigner(KEYS, "controller", prefer=Algorithm.ED25519), RecordSigner(KEYS, "admin")
BILLING, AUDIT = RecordSigner(KEYS, "subscriber", "billing"), RecordSigner(KEYS, "subscriber", "audit")
RETIRED = RecordSigner(Keyring([replace(BILLING_OLD, status=KeyStatus.ACTIVE)]), "subscriber", "billing")
ATTACKER = RecordSigner(Keyring([new_key("mallory-1", "subscriber", Algorithm.ED25519, subject="billing")]),
                        "subscriber", "billing")
IMPOSTOR = RecordSigner(Keyring([new_key("billing-2", "subscriber", Algorithm.ED25519, subject="billing")]),
                        "subscriber", "billing")
"""A key of its own under billing's key id."""
PROD = RetentionTopics.from_names(TopicNames.for_prefix("prod."))


@dataclass(frozen=True)
class Signed:
    """An input as a producer sends it: ``signer`` signs it for ``signed_for`` (its own topic by default)."""

    record: AvroRecord
    signer: RecordSigner | None
    signed_for: str | None = None


def genuine(record: AvroRecord) -> Signed:
    """``record`` signed by who writes it: the controller, the admin, or its subscriber."""
    if isinstance(record, StreamTopology | StreamCutRecord):
        return Signed(record, CONTROLLER)
    if isinstance(record, StreamConfig):
        return Signed(record, ADMIN)
    assert isinstance(record, SubscriberCut | SubscriberChange)
    return Signed(record, {"billing": BILLING, "audit": AUDIT}[record.subscriber])


def rows(items: Sequence[Signed | AvroRecord], *, key_ids: Sequence[bytes | None] = ()) -> pd.DataFrame:
    """The rows the stateful step gets for ``items`` (a plain record: signed by who writes it)."""
    codec = build_codec()
    out = []
    for offset, item in enumerate(items):
        signed = item if isinstance(item, Signed) else genuine(item)
        topic = next(t for t, kind in TOPICS.input_types().items() if isinstance(signed.record, kind))
        key, value = key_of(signed.record).encode(), codec.encode(signed.record, topic)
        key_id = signature = None
        if signed.signer is not None:
            (_, key_id), (_, signature) = signed.signer.headers(signed.signed_for or topic, key, value)
        stream = signed.record.stream
        out.append({"bucket": bucket_of(stream, DEFAULT_BUCKETS), "stream": stream, "rank": TOPICS.rank(topic),
                    "kafka_ts": millis_now(),
                    "topic": topic, "partition": 0, "offset": offset, "key": key, "value": value,
                    "key_id": key_id, "signature": signature})
    return pd.DataFrame(out, columns=list(INPUT_COLUMNS))


def run(keys: JobKeys, frame: pd.DataFrame, previous: GroupState | None = None,
        bucket: int = BUCKET) -> tuple[pd.DataFrame, GroupState]:
    # The records' own times are the clock's (see test_spark_job's helpers): so is the batch's, not an instant
    # fixed when the module was imported, which a slow test run before this one leaves minutes behind.
    state = group_state(millis_now(), previous)
    step = stream_retention_step(TOPICS, None, REEVALUATE_MS, keys=keys)
    return pd.concat(list(step((bucket,), [frame], state)), ignore_index=True), state


ENFORCE = job_keys(KEYS, AuthMode.ENFORCE)


def refusals(out: pd.DataFrame) -> list[tuple[str | None, str]]:
    """The UNAUTHENTICATED rejects as (subscriber, reason label); every other reject fails the test."""
    found = rejects(out)
    assert all(r.kind is RejectKind.UNAUTHENTICATED for r in found), found
    return [(r.subscriber, r.reason.split(":")[0]) for r in found]


def set_up(policy: RetentionPolicy = CONSUMPTION, *extra: Signed | AvroRecord) -> tuple[pd.DataFrame, GroupState]:
    """A stream with subscriber billing at at(10, 10) and a recorded cut at its tail, all genuine."""
    out, state = run(ENFORCE, rows([*stream_with(policy, "billing"), consumed("billing", at(10, 10)),
                                    recorded(at(300, 300)), *extra]))
    assert rejects(out) == []
    return out, state


def test_genuine_inputs_truncate_and_the_event_carries_a_signature_the_applier_accepts() -> None:
    out, _ = set_up()
    assert [e.cut for e in events(out)] == [at(10, 10)]
    [row] = out[out.outcome == "truncation"].itertuples()
    applier = RecordVerifier(Keyring(key.public_only() for key in KEYS if key.algorithm is Algorithm.ED25519))
    headers = [(H_KEY_ID, row.key_id), (H_SIGNATURE, row.signature)]
    signer = applier.verify(TOPICS.truncation, row.key, row.value, headers, signers_of(TruncationEvent))
    assert (signer.key_id, signer.role) == ("job-1", "retention-job")  # type: ignore[union-attr]
    assert out[out.outcome != "truncation"].signature.isna().all()


def test_the_executors_get_public_halves_and_the_job_s_own_ed25519_key_only() -> None:
    shipped = parse_keyring(ENFORCE.keyring_toml)
    assert {k.id for k in shipped} == {k.id for k in KEYS if k.algorithm is Algorithm.ED25519}
    assert [k.id for k in shipped if k.private is not None] == ["job-1"]
    assert all(k.secret is None for k in shipped) and "secret" not in ENFORCE.keyring_toml
    assert "keyring_toml" not in repr(ENFORCE)
    assert pickle.loads(pickle.dumps(ENFORCE)) == ENFORCE  # it travels with the job's function


def test_a_forged_cut_at_the_tail_is_refused_whoever_forged_it_and_the_genuine_cut_still_moves() -> None:
    _, state = set_up()
    tail = consumed("billing", at(300, 300))
    forged = [Signed(tail, None), Signed(tail, ATTACKER), Signed(tail, CONTROLLER), Signed(tail, IMPOSTOR),
              Signed(tail, AUDIT), Signed(tail, RETIRED), Signed(tail, BILLING, PROD.subscriber_cuts)]
    out, state = run(ENFORCE, rows(forged), state)

    assert refusals(out) == [(None, "unsigned"), (None, "unknown-key"), (None, "wrong-role"),
                             (None, "bad-signature"), ("billing", "wrong-subject"), (None, "retired-key"),
                             (None, "bad-signature")]
    assert events(out) == []
    out, _ = run(ENFORCE, rows([consumed("billing", at(50, 50))]), state)
    assert rejects(out) == [] and [e.cut for e in events(out)] == [at(50, 50)]


def test_forged_adds_and_removes_at_high_generations_are_refused_and_do_not_lock_the_subscriber_out() -> None:
    _, state = set_up()
    forged = [Signed(subscribe("billing", 999), ATTACKER), Signed(unsubscribe("billing", 1000), ATTACKER),
              Signed(subscribe("billing", 999), AUDIT), Signed(unsubscribe("billing", 1000), AUDIT),
              Signed(unsubscribe("billing", 1000), CONTROLLER)]
    out, state = run(ENFORCE, rows(forged), state)
    assert refusals(out) == [(None, "unknown-key"), (None, "unknown-key"), ("billing", "wrong-subject"),
                             ("billing", "wrong-subject"), (None, "wrong-role")]

    # billing itself moves to generation 2 and its cut there counts; an admin may add a subscriber.
    out, _ = run(ENFORCE, rows([subscribe("billing", 2), consumed("billing", at(60, 60), generation=2),
                                Signed(subscribe("ops", 1), ADMIN)]), state)
    assert rejects(out) == []
    assert [e.cut for e in events(out)] == [at(60, 60)]


def test_a_subscriber_key_cannot_add_itself_to_a_stream_it_is_not_granted_and_cut_it_at_the_tail() -> None:
    # Issue #39's finding 2: audit's key, granted STREAM only, adds audit to PAYMENTS (CONSUMPTION, no
    # subscriber, so no cut holds the bound) and cuts at its tail; before grants the job truncated it whole.
    bucket, tail = bucket_of(PAYMENTS, DEFAULT_BUCKETS), at(300, 300)
    _, state = run(ENFORCE, rows([*stream_with(CONSUMPTION, stream=PAYMENTS), recorded(tail, stream=PAYMENTS)]),
                   bucket=bucket)
    kept = decode_bucket(state.get[0])[PAYMENTS].state
    attack = [subscribe("audit", stream=PAYMENTS), consumed("audit", tail, stream=PAYMENTS)]
    before = REGISTRY.get_sample_value("reclaim_unauthenticated_records_total",
                                       {"topic": TOPICS.subscriber_cuts, "reason": "not_granted"}) or 0.0

    out, state = run(ENFORCE, rows(attack), state, bucket)
    assert refusals(out) == [("audit", "not-granted"), ("audit", "not-granted")]
    assert all(PAYMENTS in r.reason and "audit-1" in r.reason for r in rejects(out))
    assert events(out) == []
    assert decode_bucket(state.get[0])[PAYMENTS].state == kept  # audit is no subscriber of PAYMENTS
    assert (REGISTRY.get_sample_value("reclaim_unauthenticated_records_total",
                                      {"topic": TOPICS.subscriber_cuts, "reason": "not_granted"}) or 0.0) == before + 1

    # The same records from billing's key, which scope/* grants, truncate PAYMENTS at the tail: the attack
    # above was refused for its grant alone.
    out, _ = run(ENFORCE, rows([subscribe("billing", stream=PAYMENTS), consumed("billing", tail, stream=PAYMENTS)]),
                 state, bucket)
    assert rejects(out) == [] and [e.cut for e in events(out)] == [tail]


def test_an_admin_may_add_a_subscriber_to_any_stream_whose_key_still_cuts_only_where_granted() -> None:
    bucket, tail = bucket_of(PAYMENTS, DEFAULT_BUCKETS), at(300, 300)
    out, _ = run(ENFORCE, rows([*stream_with(CONSUMPTION, stream=PAYMENTS), recorded(tail, stream=PAYMENTS),
                                Signed(subscribe("audit", stream=PAYMENTS), ADMIN),
                                consumed("audit", tail, stream=PAYMENTS)]), bucket=bucket)
    assert refusals(out) == [("audit", "not-granted")]  # the admin's ADD holds, audit's own cut does not
    assert events(out) == []


def test_a_config_shrinking_the_limits_needs_the_admin_key() -> None:
    _, state = set_up()
    shrunk = config(RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, 0))
    out, state = run(ENFORCE, rows([Signed(shrunk, BILLING), Signed(shrunk, CONTROLLER), Signed(shrunk, None)]),
                     state)
    assert refusals(out) == [(None, "wrong-role"), (None, "wrong-role"), (None, "unsigned")]
    assert events(out) == []

    out, _ = run(ENFORCE, rows([Signed(shrunk, ADMIN)]), state)  # the same config from the admin holds
    assert [e.cut for e in events(out)] == [at(300, 300)]


def test_a_recorded_cut_with_a_false_size_needs_the_controller_key() -> None:
    # At most 300 bytes kept: an entry claiming the stream holds 10^9 bytes would cut past the subscriber.
    size_max_300 = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, 300)
    first, state = run(ENFORCE, rows([*stream_with(size_max_300, "billing"), consumed("billing", at(10, 10)),
                                      recorded(at(100, 100), 3 * MINUTE_MS)]))
    assert [e.cut for e in events(first)] == [at(10, 10)]
    false = replace(recorded(at(150, 150)), recording_size=10**9)
    out, state = run(ENFORCE, rows([Signed(false, ADMIN), Signed(false, BILLING), Signed(false, ATTACKER)]), state)
    assert refusals(out) == [(None, "wrong-role"), (None, "wrong-role"), (None, "unknown-key")]
    assert events(out) == []

    out, _ = run(ENFORCE, rows([Signed(false, CONTROLLER)]), state)  # what the controller records counts
    assert [e.cut for e in events(out)] == [at(150, 150)]


def test_a_topology_rewriting_the_epochs_needs_the_controller_key() -> None:
    _, state = set_up()
    # One segment over the whole key space: segment 1 of every cut so far would no longer exist.
    rewritten = StreamTopology(STREAM, (TopologyEpoch(0, 0, (TopologySegment(0, 0.0, 1.0),)),), (),
                               TopologyState.ACTIVE, millis_now() + 1)
    deleted = StreamTopology(STREAM, (), (), TopologyState.DELETED, millis_now() + 2)
    out, state = run(ENFORCE, rows([Signed(rewritten, ADMIN), Signed(deleted, BILLING),
                                    Signed(rewritten, CONTROLLER, PROD.stream_topology)]), state)
    assert refusals(out) == [(None, "wrong-role"), (None, "wrong-role"), (None, "bad-signature")]

    out, _ = run(ENFORCE, rows([consumed("billing", at(50, 50))]), state)
    assert rejects(out) == [] and [e.cut for e in events(out)] == [at(50, 50)]


def test_a_record_replayed_under_another_stream_s_key_is_refused() -> None:
    other = consumed("billing", at(300, 300), stream="scope/other")
    codec = build_codec()
    value = codec.encode(other, TOPICS.subscriber_cuts)
    (_, key_id), (_, signature) = BILLING.headers(TOPICS.subscriber_cuts, b"scope/other#billing", value)
    frame = rows([consumed("billing", at(1, 1))])  # a row of STREAM, whose value and signature are replaced
    frame.loc[0, ["value", "key_id", "signature"]] = pd.Series([value, key_id, signature],
                                                               index=["value", "key_id", "signature"])
    _, state = set_up()
    out, _ = run(ENFORCE, frame, state)
    assert refusals(out) == [(None, "bad-signature")]


def test_malformed_signature_headers_and_keyless_rows_are_refused_first() -> None:
    _, state = set_up()
    frame = rows([consumed("billing", at(300, 300))])
    frame.loc[0, "key_id"], frame.loc[0, "signature"] = b"", None  # e.g. two key ids: signature_columns
    out, _ = run(ENFORCE, frame, state)
    assert refusals(out) == [(None, "malformed-signature")]

    keyless = rows([Signed(consumed("billing", at(300, 300)), None)]).assign(key=None, bucket=UNDECODABLE_BUCKET)
    out, _ = run(ENFORCE, keyless, bucket=UNDECODABLE_BUCKET)
    [reject] = rejects(out)
    assert (reject.stream, reject.kind, reject.reason.split(":")[0]) == ("", RejectKind.UNAUTHENTICATED, "unsigned")


def test_rollout_accepts_unsigned_inputs_counted_but_still_refuses_badly_signed_ones() -> None:
    rollout = replace(ENFORCE, mode=AuthMode.ROLLOUT)
    before = REGISTRY.get_sample_value("reclaim_unsigned_records_accepted_total",
                                       {"topic": TOPICS.subscriber_cuts}) or 0.0
    unsigned = [Signed(r, None) for r in stream_with(CONSUMPTION, "billing")]
    out, _ = run(rollout, rows([*unsigned, Signed(consumed("billing", at(10, 10)), None),
                                Signed(recorded(at(300, 300)), None),
                                Signed(consumed("billing", at(300, 300)), ATTACKER)]))
    assert refusals(out) == [(None, "unknown-key")]
    assert [e.cut for e in events(out)] == [at(10, 10)]
    assert (REGISTRY.get_sample_value("reclaim_unsigned_records_accepted_total",
                                      {"topic": TOPICS.subscriber_cuts}) or 0.0) - before == 1


def test_without_verification_inputs_are_not_checked_and_events_are_still_signed() -> None:
    off = replace(ENFORCE, mode=None)
    out, _ = run(off, rows([Signed(r, None) for r in [*stream_with(CONSUMPTION, "billing"),
                                                      consumed("billing", at(10, 10)), recorded(at(300, 300))]]))
    assert rejects(out) == [] and [e.cut for e in events(out)] == [at(10, 10)]
    assert out[out.outcome == "truncation"].signature.notna().all()


def test_the_job_signs_only_with_an_ed25519_key_of_its_own() -> None:
    hmac_only = Keyring(k for k in KEYS if k.id != "job-1")
    with pytest.raises(SigningError, match="no active ed25519 key for role retention-job"):
        job_keys(hmac_only, AuthMode.ENFORCE)
    verify_only = job_keys(hmac_only, AuthMode.ENFORCE, sign=False)
    assert not verify_only.signs and all(k.private is None for k in parse_keyring(verify_only.keyring_toml))
    out, _ = run(verify_only, rows([*stream_with(CONSUMPTION, "billing"), consumed("billing", at(10, 10)),
                                    recorded(at(300, 300))]))
    assert [e.cut for e in events(out)] == [at(10, 10)]
    assert out.signature.isna().all()


def _keyring_file(tmp_path: Path, keyring: Keyring) -> Path:
    path = tmp_path / "keyring.toml"
    path.write_text(keyring.to_toml())
    path.chmod(0o600)
    return path


def test_the_job_s_keys_come_from_the_process_keyring_once_on_the_driver(tmp_path: Path) -> None:
    path = _keyring_file(tmp_path, KEYS)
    keys = executor_keys(RetentionJobSettings(keyring=path, state_dir=tmp_path))
    assert keys is not None and (keys.mode, keys.signs) == (AuthMode.ENFORCE, True)
    assert parse_keyring(keys.keyring_toml).get("job-1") == KEYS.get("job-1")
    rollout = executor_keys(RetentionJobSettings(keyring=path, record_auth="rollout", state_dir=tmp_path))
    assert rollout is not None and rollout.mode is AuthMode.ROLLOUT
    off = executor_keys(RetentionJobSettings(keyring=path, record_auth="off", state_dir=tmp_path))
    assert off is not None and (off.mode, off.signs) == (None, True)  # unverified inputs, signed events
    assert executor_keys(RetentionJobSettings(state_dir=tmp_path)) is None


def test_a_keyring_without_the_job_s_key_stops_the_job_unless_signing_is_rolled_out(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _keyring_file(tmp_path, Keyring(k for k in KEYS if k.role != "retention-job"))
    with pytest.raises(SigningError, match="no active ed25519 key for role retention-job"):
        executor_keys(RetentionJobSettings(keyring=path, state_dir=tmp_path))
    rollout = executor_keys(RetentionJobSettings(keyring=path, record_auth="rollout", state_dir=tmp_path))
    assert rollout is not None and (rollout.mode, rollout.signs) == (AuthMode.ROLLOUT, False)
    assert "truncation events go unsigned" in caplog.text
    assert executor_keys(RetentionJobSettings(keyring=path, record_auth="off", state_dir=tmp_path)) is None
