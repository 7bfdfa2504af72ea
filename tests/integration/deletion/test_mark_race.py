"""Two phase-1 mark services in two processes race to mark overlapping chunks of the same segments, on
each engine, while a third process moves some of those chunks (a layout update bumping their rows).
No chunk ends in two committed marks or both live and marked; every refusal is a typed, retryable
conflict; phase 2 then deletes exactly the chunks of the marks that committed and nothing else."""

from __future__ import annotations

import multiprocessing
import random
from collections import Counter
from dataclasses import replace
from multiprocessing.queues import Queue
from pathlib import Path

import pytest

from reclaim.deletion.mark import LedgerDeletionService, MarkError
from reclaim.errors import ReclaimError
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.producers.producer import RecordProducer
from reclaim.schemas.codec import build_codec
from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.sql_store import open_metadata_store
from tests.support.pipeline import Pipeline, read_all

pytestmark = pytest.mark.integration

ROUNDS = 25
Result = tuple[str, list[tuple[str, list[str]]], dict[str, int]]


def _mark(location: str, bootstrap: str, topic: str, names: list[str], seed: int, results: Queue[Result]) -> None:
    """Mark random overlapping handfuls of ``names`` (those still active when read), ROUNDS times."""
    store = open_metadata_store(location)
    producer = RecordProducer(bootstrap, "idempotent-producer")
    service = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, build_codec(), topic))
    rng, committed, refused = random.Random(seed), [], Counter[str]()
    for _ in range(ROUNDS):
        rows = store.get_chunks(rng.sample(names, 12))
        try:
            result = service.mark([row for row in rows.values() if row.active])
            committed.append((result.mark_id, list(result.marked)))
        except (MetadataConflictError, MarkError) as exc:
            assert exc.retryable, f"{type(exc).__name__} is a refusal but not retryable"
            refused[type(exc).__name__] += 1
        except ReclaimError as exc:  # any other typed error fails the test, by name
            refused[f"unexpected {type(exc).__name__}: {exc}"] += 1
    producer.close()
    store.close()
    results.put((f"marker-{seed}", committed, dict(refused)))


def _move(location: str, names: list[str], seed: int, results: Queue[Result]) -> None:
    """A layout update racing the marks: rewrite random chunks' rows (a new version of each) in small
    transactions, conditional on the version read."""
    store = open_metadata_store(location)
    rng, refused = random.Random(seed), Counter[str]()
    for _ in range(ROUNDS * 2):
        try:
            with store.transaction() as txn:
                for name in rng.sample(names, 4):
                    row = txn.get_chunk(name)
                    if row is not None and row.active:
                        txn.put_chunk(replace(row), expected_version=row.version)
        except MetadataConflictError as exc:
            assert exc.retryable
            refused[type(exc).__name__] += 1
    store.close()
    results.put(("mover", [], dict(refused)))


def test_two_mark_services_in_two_processes_race_on_the_same_chunks(engine_pipeline: Pipeline,
                                                                     tmp_path: Path) -> None:
    pipe = engine_pipeline
    binding = pipe.bindings.get("fs-tier2")
    chunks = [c for s in range(3) for c in pipe.write_chunks(binding, f"scope/stream/{s}.#epoch.0", 40)]
    names = [c.name for c in chunks]
    # Spawned, not forked: a forked child would share the parent's pooled PostgreSQL connections.
    ctx = multiprocessing.get_context("spawn")
    results: Queue[Result] = ctx.Queue()
    args = (pipe.store.location, pipe.bootstrap, pipe.topics.deletion, names)
    procs = [ctx.Process(target=_mark, args=(*args, seed, results)) for seed in (1, 2)]
    procs.append(ctx.Process(target=_move, args=(pipe.store.location, names, 3, results)))
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=240) for _ in procs]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0

    refused = Counter[str]()
    claims: Counter[str] = Counter()
    for _, committed, refusals in outcomes:
        refused.update(refusals)
        for _, marked in committed:
            claims.update(marked)
    assert not [r for r in refused if r.startswith("unexpected")], refused
    assert claims and max(claims.values()) == 1, "a chunk is in two committed marks"
    marked = set(claims)
    rows = pipe.store.get_chunks(names)
    assert {n for n, row in rows.items() if not row.active} == marked, "a chunk both live and marked"

    worker = pipe.worker(mark_timeout_s=2)  # records of marks that lost their race are judged in use after it
    pipe.drain(worker, lambda _: not marked & set(binding.iter_names()) and _inflight(pipe) == 0, timeout_s=120)
    assert set(binding.iter_names()) == set(names) - marked, "deleted a live chunk, or left a marked one"
    assert set(pipe.store.get_chunks(names)) == set(names) - marked
    assert read_all(pipe, pipe.topics.dlq, 1, timeout_s=2) == []


def _inflight(pipe: Pipeline) -> int:
    from reclaim.consumers.lag import estimated_inflight

    return estimated_inflight(pipe.bootstrap, pipe.group_id, pipe.topics.deletion_inputs)
