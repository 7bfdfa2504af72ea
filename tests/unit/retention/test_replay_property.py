"""Issue #39's property, on the pure core: random sequences of stream create/delete/re-create, subscriber
add/remove/cut signed with granted and ungranted keys, key retirements and replays of any earlier record, fed
through the job's checks (signature, subject and grant, incarnation) into its state and decided, with the
applier's incarnation gate after it. Whatever the sequence, nothing but a genuine, granted, live record of the
current incarnation moves a subscriber's cut, and no truncation passes the gate beyond the smallest cut the
current incarnation's subscribers hold (the policy has no maximum, so nothing else may truncate) or inside
the policy's minimum."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from reclaim.retention.spark_auth import check_subject
from reclaim.retention.stream_state import StreamRetentionState
from reclaim.schemas import build_codec
from reclaim.schemas.base import AvroRecord, new_incarnation
from reclaim.schemas.streams import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    StreamConfig,
    StreamCut,
    StreamCutRecord,
)
from reclaim.schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut
from reclaim.schemas.topology import StreamTopology, TopologyEpoch, TopologySegment, TopologyState
from reclaim.security.keyring import Algorithm, Key, Keyring, KeyStatus, new_key
from reclaim.security.rules import signers_of
from reclaim.security.signing import AuthMode, RecordSigner, RecordVerifier, Signer

STREAM = "scope/s"
TOPICS = {StreamTopology: "topology", StreamConfig: "config", SubscriberChange: "subscribers",
          SubscriberCut: "subscriber-cuts", StreamCutRecord: "stream-cuts"}
MIN_KEEP = 20
POLICY = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, MIN_KEEP)  # keep 20 bytes; no maximum


def _subscriber_key(key_id: str, subject: str, streams: tuple[str, ...]) -> Key:
    return replace(new_key(key_id, "subscriber", Algorithm.ED25519, subject=subject), streams=streams)


KEYS = {
    "a": _subscriber_key("a-1", "a", ("scope/*",)),
    "b": _subscriber_key("b-1", "b", (STREAM,)),
    "x": _subscriber_key("x-1", "x", ("other/*",)),  # not granted this stream
}
CONTROLLER = new_key("ctl-1", "controller", Algorithm.ED25519)
ADMIN = new_key("admin-1", "admin", Algorithm.ED25519)


class Keys:
    """A keyring that changes while the verifier runs, as a keyring file does (retired keys)."""

    def __init__(self) -> None:
        self.retired: set[str] = set()
        self._ring = self._make()

    def _make(self) -> Keyring:
        keys = [CONTROLLER, ADMIN, *KEYS.values()]
        return Keyring(replace(k, status=KeyStatus.RETIRED) if k.id in self.retired else k for k in keys)

    def retire(self, key_id: str) -> None:
        self.retired.add(key_id)
        self._ring = self._make()

    def current(self) -> Keyring:
        return self._ring


@dataclass(frozen=True)
class Sent:
    """One record on the bus, as written: its value, its signature headers, and who may have made it count."""

    record: AvroRecord
    value: bytes
    headers: list[tuple[str, bytes]]
    key_id: str
    incarnation: str | None


class ReplayMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.keys = Keys()
        self.verifier = RecordVerifier(self.keys, AuthMode.ENFORCE)
        self.signing = Keyring([CONTROLLER, ADMIN, *KEYS.values()])  # what each signer holds (retired or not)
        self.state = StreamRetentionState(STREAM)
        self.codec = build_codec()
        self.sent: list[Sent] = []
        self.incarnation: str | None = None  # the controller's truth: the stream's current incarnation
        self.exists = False
        self.clock = 1
        self.tail = 0
        self.generations = {name: 0 for name in KEYS}
        self.genuine: set[tuple[str, str, int]] = set()  # (incarnation, subscriber, offset) of genuine cuts

    # -- the bus -------------------------------------------------------------------------------------------
    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _send(self, record: AvroRecord, key_id: str) -> None:
        topic = TOPICS[type(record)]
        value = self.codec.encode(record, topic)
        signer = RecordSigner(Keyring([self.signing.get(key_id)]), self.signing.get(key_id).role,  # type: ignore[list-item, union-attr]
                              self.signing.get(key_id).subject)  # type: ignore[union-attr]
        sent = Sent(record, value, signer.headers(topic, STREAM.encode(), value), key_id, self.incarnation)
        self.sent.append(sent)
        self._deliver(sent)

    def _deliver(self, sent: Sent) -> None:
        """What the job does with a record: verify, check subject and grant, then apply with incarnations required."""
        record, topic = sent.record, TOPICS[type(sent.record)]
        signer = self.verifier.verify(topic, STREAM.encode(), sent.value, sent.headers, signers_of(type(record)))
        if not isinstance(signer, Signer) or check_subject(self.verifier, topic, signer, record) is not None:
            return
        self.state.apply(self.codec.decode(sent.value, topic, type(record)), self.clock, require_incarnation=True,  # type: ignore[arg-type]
                         signed_by=str(signer))

    def _topology(self, state: TopologyState) -> StreamTopology:
        epochs = () if state is TopologyState.DELETED else (TopologyEpoch(0, 0, (TopologySegment(0, 0.0, 1.0),)),)
        return StreamTopology(STREAM, epochs, (), state, self._tick(), self.incarnation)

    def _live(self, name: str) -> bool:
        key = KEYS[name]
        return key.id not in self.keys.retired and key.grants(STREAM)

    # -- rules ---------------------------------------------------------------------------------------------
    @precondition(lambda self: not self.exists)
    @rule()
    def create(self) -> None:
        self.incarnation, self.exists, self.tail = new_incarnation(), True, 0
        self.generations = {name: 0 for name in KEYS}  # a new stream's subscribers start over at generation 1
        self._send(self._topology(TopologyState.ACTIVE), CONTROLLER.id)
        self._send(StreamConfig(STREAM, POLICY, self._tick(), self.incarnation), ADMIN.id)

    @precondition(lambda self: self.exists)
    @rule()
    def delete(self) -> None:
        self.exists = False
        self._send(self._topology(TopologyState.DELETED), CONTROLLER.id)

    @precondition(lambda self: self.incarnation is not None)
    @rule(name=st.sampled_from(sorted(KEYS)), add=st.booleans())
    def subscribe(self, name: str, add: bool) -> None:
        self.generations[name] += 1
        kind = SubscriberChangeType.ADD if add else SubscriberChangeType.REMOVE
        self._send(SubscriberChange(STREAM, name, self.generations[name], kind, self._tick(), self.incarnation),
                   KEYS[name].id)

    @precondition(lambda self: self.exists)
    @rule(name=st.sampled_from(sorted(KEYS)), offset=st.integers(0, 100))
    def cut(self, name: str, offset: int) -> None:
        where = offset % (self.tail + 1)
        record = SubscriberCut(STREAM, name, self.generations[name], StreamCut.from_mapping({0: where}), self._tick(),
                               self.incarnation)
        if self._live(name):
            assert self.incarnation is not None
            self.genuine.add((self.incarnation, name, where))
        self._send(record, KEYS[name].id)

    @precondition(lambda self: self.exists)
    @rule(grow=st.integers(1, 50))
    def record(self, grow: int) -> None:
        self.tail += grow
        self._send(StreamCutRecord(STREAM, StreamCut.from_mapping({0: self.tail}), self._tick(), self.tail,
                                   self.incarnation), CONTROLLER.id)

    @rule(name=st.sampled_from(sorted(KEYS)), roll=st.integers(0, 3))
    def retire(self, name: str, roll: int) -> None:
        if roll == 0:  # a retirement is rarer than the other steps, so that runs reach truncations
            self.keys.retire(KEYS[name].id)

    @precondition(lambda self: bool(self.sent))
    @rule(index=st.integers(0, 10**6))
    def replay(self, index: int) -> None:
        self._tick()
        self._deliver(self.sent[index % len(self.sent)])

    @precondition(lambda self: bool(self.sent))
    @rule(start=st.integers(0, 10**6), count=st.integers(1, 12))
    def replay_run(self, start: int, count: int) -> None:
        """Replay a run of earlier records in their order (a captured stretch of a topic)."""
        begin = start % len(self.sent)
        for sent in self.sent[begin:begin + count]:
            self._tick()
            self._deliver(sent)

    @precondition(lambda self: len({s.incarnation for s in self.sent}) > 1)
    @rule(pick=st.integers(0, 10**6))
    def replay_an_ended_incarnation(self, pick: int) -> None:
        """Replay, in order, everything captured of an incarnation that has ended (the stream deleted since)."""
        ended = sorted({s.incarnation for s in self.sent if s.incarnation != self.incarnation})
        chosen = ended[pick % len(ended)]
        for sent in [s for s in self.sent if s.incarnation == chosen]:
            self._tick()
            self._deliver(sent)

    # -- what must hold --------------------------------------------------------------------------------------
    @invariant()
    def only_genuine_cuts_of_the_current_incarnation_count(self) -> None:
        if self.state.incarnation is None:
            return
        for subscriber in self.state.registry.holding():
            assert subscriber.cut is not None
            # A re-added subscriber keeps its cut (PDP-47): the generation it was published at may be older.
            found = (self.state.incarnation, subscriber.name, subscriber.cut[0])
            assert found in self.genuine, f"{found} was never published by a live, granted key"

    @invariant()
    def no_truncation_passes_the_gate_beyond_the_subscribers_cuts(self) -> None:
        event = self.state.decide(self.clock)
        if event is None or not self.exists or event.incarnation != self.incarnation:
            return  # nothing decided, or refused at the applier (another incarnation: WRONG_INCARNATION)
        holding = [s.cut[0] for s in self.state.registry.holding() if s.cut is not None]
        assert holding, f"a truncation at {event.cut} with no subscriber cut and no max limit"
        assert event.cut[0] <= min(holding)
        assert self.tail - event.cut[0] >= MIN_KEEP, f"a truncation at {event.cut} keeps less than {MIN_KEEP} bytes"


TestReplays = ReplayMachine.TestCase
TestReplays.settings = settings(max_examples=400, stateful_step_count=30, deadline=None)
