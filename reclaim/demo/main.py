"""``reclaim demo``: the end-to-end run on the embedded default stack, told as it goes: a few lines a step on
stdout, the full log of every part in ``<state-dir>/demo.log`` (its path printed first)."""

from __future__ import annotations

import logging
from collections import Counter

from prometheus_client import REGISTRY

from reclaim.deletion.mark import LedgerDeletionService
from reclaim.deletion.records import pending_deletes_for
from reclaim.demo.offload import show_offload
from reclaim.demo.output import CONSOLE, demo_keyring, demo_settings, drain, say, stack_settings, step
from reclaim.demo.retention import show_retention
from reclaim.demo.roundtrip import round_trip_every_record
from reclaim.extras import require
from reclaim.localstack import stack
from reclaim.logs import log_to_file
from reclaim.producers.producer import RecordProducer
from reclaim.schemas.base import millis_now
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.streams import StreamController
from reclaim.segments.walkthrough import run_txn_walkthrough
from reclaim.services import preflight, runtime
from reclaim.settings import Settings
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkStorage
from reclaim.storage.metadata import ChunkRecord
from reclaim.storage.sql_store import SQLMetadataStore
from reclaim.tools.topics import admin_client, create_topics, topic_specs

log = logging.getLogger(__name__)

#: Counters the demo prints at the end, with their labels.
SHOWN_COUNTERS = [
    ("reclaim_pending_deletes_sent_total", {"ledger_type": "offload_ledger"}),
    ("reclaim_deletion_messages_received_total", None),
    ("reclaim_ledgers_deleted_total", {"ledger_type": "offload_ledger"}),
    ("reclaim_deletion_messages_acked_total", {}),
    ("reclaim_deletion_retries_sent_total", None),
    ("reclaim_deletion_dlq_sent_total", None),
    ("reclaim_mark_batches_total", {"result": "complete"}),
    ("reclaim_unauthenticated_records_total", None),
]


def counter(name: str, labels: dict[str, str] | None) -> float:
    """A counter's value; with ``labels`` None, the sum over all its label sets."""
    if labels is not None:
        return REGISTRY.get_sample_value(name, labels) or 0.0
    total = 0.0
    for family in REGISTRY.collect():
        total += sum(s.value for s in family.samples if s.name == name)
    return total


def run_demo(settings: Settings, keep_stack: bool = False) -> int:
    """Start the stack, provision topics, round-trip every record, then garbage-collect real segments."""
    require("local", "reclaim demo")  # its stack's S3 endpoint; both checked before anything starts
    require("spark", "reclaim demo (its retention part)")
    # Its warnings too: the demo forges a record to show it refused, and says so in its story.
    log_file = log_to_file(settings.state_dir / "demo.log", terminal=logging.ERROR)
    CONSOLE.rule("[bold]reclaim demo")
    say(f"the full log of every part: {log_file}")  # Spark's, Ivy's and py4j's output too
    state = stack.up(settings)
    settings = stack_settings(settings, state)
    try:
        say(f"stack up: kafka {state.bootstrap} (PLAINTEXT: no authentication, no ACLs), s3 {state.s3_url} "
            f"(bucket {state.s3_bucket})")
        bootstrap = preflight.bootstrap(settings)  # the local stack's (stack_settings)
        keyring = demo_keyring(settings)
        say(f"  records signed and verified with the demo's keyring {keyring} (every role's keys in one file)")
        outcomes = create_topics(admin_client(bootstrap), topic_specs(settings))
        by_outcome = Counter(outcomes.values())
        say(f"  {len(outcomes)} topics under {settings.topic_prefix!r}: "
            + ", ".join(f"{count} {outcome}" for outcome, count in sorted(by_outcome.items())))
        step("every record type through the broker (Avro single-object encoding)")
        for name, size in round_trip_every_record(bootstrap, runtime.codec(settings), settings.topic_prefix):
            say(f"  {name:28} {size:5d} bytes  round trip ok")
        step("segments on tier-2, truncated and deleted, collected by the two-phase pipeline")
        collect_garbage(settings, bootstrap)
        step("offload: a stream from tier-1 to tier-2 by its policy, truncated mid-offload")
        show_offload(settings, bootstrap)
        step("retention: subscribers, the Spark retention job, the truncation applier")
        show_retention(settings, bootstrap, log_file)
    finally:
        if not keep_stack:
            stack.down(settings)
            say("\nstack down")
    return 0


def collect_garbage(settings: Settings, bootstrap: str) -> None:
    demo = demo_settings(settings, bootstrap, "demo")
    store = runtime.metadata_store(demo)
    bindings = runtime.storage_bindings(demo, writer=True)
    producer = RecordProducer(bootstrap, "idempotent-producer")
    try:
        service = runtime.deletion_service(demo, store, producer)
        for binding in bindings:
            show_segments(store, binding, bindings, service)
        drain(demo, store, bindings)
        victim = show_forgery(demo, store, bindings.get("fs-tier2"), bootstrap)
        drain(demo, store, bindings)
        if not bindings.get("fs-tier2").exists(victim):
            raise AssertionError(f"a forged pending delete deleted {victim}")
        say("  dead-lettered as unauthenticated before any check; the chunk is still on tier-2")
        step("a stream: scaled, one transaction committed across the scale, another aborted")
        aborted = show_stream(demo, store, bindings.get("fs-tier2"), bindings, service)
        drain(demo, store, bindings)
        fs = bindings.get("fs-tier2")
        left = [c.name for c in aborted if fs.exists(c.name)]
        say(f"  aborted transaction: {len(aborted) - len(left)} of {len(aborted)} chunks deleted from tier-2")
        if left:
            raise AssertionError(f"aborted chunks still on tier-2: {left}")
        for binding in bindings:
            left = sorted(binding.iter_names())
            say(f"  {binding.name}: {len(left)} chunks left on tier-2 (the live layout)")
    finally:
        producer.close()
        bindings.close()
        store.close()
    step("counters")
    for name, labels in SHOWN_COUNTERS:
        say(f"  {name:44} {counter(name, labels):8.0f}")


def show_forgery(settings: Settings, store: SQLMetadataStore, binding: ChunkStorage, bootstrap: str) -> str:
    """A pending delete for a live chunk sent by someone without the controller's key: never obeyed."""
    victim = next(iter(binding.iter_names()))
    row = store.get_chunks([victim])[victim]
    [record] = pending_deletes_for([row], "forged-mark", millis_now())
    topic = runtime.topic_names(settings).deletion
    forger = RecordProducer(bootstrap, "producer")
    try:
        forger.send(topic, runtime.codec(settings).encode(record, topic), key=victim.encode())
        forger.producer.flush(10)
    finally:
        forger.close()
    step(f"a forged pending delete (unsigned) for the live chunk {victim}")
    return victim


def show_segments(store: SQLMetadataStore, binding: ChunkStorage, bindings: StorageBindings,
                  service: LedgerDeletionService) -> None:
    storage = ChunkedSegmentStorage(store, binding, service, bindings=bindings, max_rolling_length=1024)
    stream = f"demo/orders-{binding.name}"
    names = [f"{stream}/{i}.#epoch.0" for i in range(3)]
    for name in names:
        storage.create(name, stream=stream)
        storage.write(storage.open_write(name, epoch=1), 0, b"x" * 4096)
    before = {name: storage.layout(name) for name in names}
    storage.truncate(names[0], 2048)
    storage.delete(names[1])
    live = {c.name for c in storage.layout(names[0])}
    handed = [c.name for c in before[names[0]] if c.name not in live] + [c.name for c in before[names[1]]]
    say(f"  {binding.name}: 3 segments x {len(before[names[0]])} chunks; truncated {names[0]} at 2048, "
        f"deleted {names[1]}; chunks handed to phase 1:")
    for name in handed:
        say(f"    {name}")


def show_stream(settings: Settings, store: SQLMetadataStore, binding: ChunkStorage, bindings: StorageBindings,
                service: LedgerDeletionService) -> tuple[ChunkRecord, ...]:
    """PDP-24 on real storage: the aborted transaction's chunks go to phase 1, the committed one's stay."""
    storage = ChunkedSegmentStorage(store, binding, service, bindings=bindings, max_rolling_length=64)
    controller = StreamController.beside(storage, settings.metadata_location)
    try:
        walk = run_txn_walkthrough(controller, "demo", "payments")
        say(f"  stream {walk.stream}: scaled to epoch {walk.scaled_to.epoch} "
            f"({len(walk.scaled_to.segments)} segments)")
        say(f"  committed txn {walk.committed.txn_id.hex} rolled into {', '.join(walk.committed_segments)}")
        for segment, data in zip(walk.committed_segments, walk.committed_bytes, strict=True):
            say(f"    {segment}: {len(data)} bytes, {data.count(b'committed:')} committed writes")
        say(f"  aborted txn {walk.aborted.txn_id.hex}: {len(walk.aborted_chunks)} chunks handed to phase 1")
        return walk.aborted_chunks
    finally:
        controller.close()
