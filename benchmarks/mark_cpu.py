"""Phase 1's CPU per record, by stage: ``LedgerDeletionService.mark`` on the process's CPU clock.

The measure is CPU time (``time.process_time``: every thread of this process, librdkafka's included;
not the broker's, which runs in its own process) divided by the records of one mark. It does not depend
on what else runs on the machine, as the wall clock does. Two figures per stage:

  - with start: the CPU of one mark of N records over N (fixed costs spread over the batch);
  - marginal: (CPU of a mark of L records - CPU of a mark of S records) / (L - S), the cost each
    further record adds (``--pairs``, default 2000:10000 and 5000:20000).

Stages, in the order a mark runs them (each the process's CPU between two probes set on the service's
objects for the run; nothing is probed when this benchmark does not run):

  - build: ``mark_records``, the mark's records as a sequence (one ``PendingDeleteLedgerInfo`` per chunk
    copy, built only when read: since d160014 nearly nothing happens here);
  - encode: every record's bytes (from the publish's start to its first send): since d160014 written from
    a template per shape without building the records, so this stage holds what build did before;
  - sign + produce: the signing (HMAC-SHA256, when signed) and the client's ``produce`` calls; librdkafka's
    threads start sending meanwhile, so their CPU in that span is counted here too. The signing alone is
    also measured on its own over the same records (``sign, alone``);
  - wait: serving delivery reports and flushing until every record is confirmed;
  - metadata: the metadata transaction (rows retired under the mark, the mark committed);
  - other: the rest of ``mark`` (ids, metrics, the sent chunks).

Beside it, for context: the CPU of a plain idempotent confluent-kafka producer sending the same encoded
records (``poll(0)`` after each, then ``flush()``), and, from ``benchmarks/deletion_throughput.py --parts
phase1``, the wall-clock ratio of ``mark`` to it.

``--before FILE``: a results file holding an earlier ``mark_cpu`` run (today's figures kept before a
change); its figures are printed beside these, with the ratio after/before.

Run: ``.venv/bin/python benchmarks/mark_cpu.py [--pairs 2000:10000,5000:20000] [--rounds 3] [--before FILE]``.
It starts its own Kafka broker unless RECLAIM_BOOTSTRAP names a running one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: the sibling modules are imported as ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402

import reclaim.deletion.mark as mark_module  # noqa: E402
from benchmarks.deletion_setup import connect, fresh_topics, new_chunks, own_broker, store_rows  # noqa: E402
from benchmarks.deletion_throughput import plain_produce, signing_with  # noqa: E402
from benchmarks.results import Figures, record  # noqa: E402
from reclaim.deletion.mark import LedgerDeletionService, new_mark_id  # noqa: E402
from reclaim.deletion.records import pending_deletes_for  # noqa: E402
from reclaim.localstack.procs import stop_pid  # noqa: E402
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher  # noqa: E402
from reclaim.producers.producer import RecordProducer  # noqa: E402
from reclaim.schemas.codec import build_codec  # noqa: E402
from reclaim.security.keyring import Algorithm  # noqa: E402
from reclaim.security.signing import RecordSigner  # noqa: E402
from reclaim.settings import Settings  # noqa: E402
from reclaim.storage.filesystem import FileSystemChunkStorage  # noqa: E402
from reclaim.storage.sql_store import SQLiteMetadataStore  # noqa: E402

STAGES = ("build", "encode", "sign + produce", "wait", "metadata", "other")
KINDS = ("unsigned", "signed")
cpu = time.process_time


class Timeline:
    """The process CPU spent in each stage of one mark: every probe closes the stage running and opens one."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(STAGES, 0.0)
        self._stage, self._since = "other", cpu()

    def enter(self, stage: str) -> None:
        now = cpu()
        self.spent[self._stage] += now - self._since
        self._stage, self._since = stage, now

    def close(self) -> None:
        self.enter("other")


@contextmanager
def probed(service: LedgerDeletionService, publisher: KafkaPendingDeletePublisher, store: SQLiteMetadataStore,
           timeline: Timeline) -> Iterator[None]:
    """Probes on these objects (and on ``mark``'s record builder) for one mark; all removed after it."""
    # The builder mark() calls: mark_records since d160014, pending_deletes_for before (an earlier tree).
    builder = "mark_records" if hasattr(mark_module, "mark_records") else "pending_deletes_for"
    build, publish, send_all, guarded = (getattr(mark_module, builder), publisher.publish, publisher._send_all,
                                         publisher._guarded)
    transaction = store.transaction

    def building(*args: Any) -> Any:
        timeline.enter("build")
        try:
            return build(*args)
        finally:
            timeline.enter("other")

    def publishing(records: Any) -> Any:
        timeline.enter("encode")
        try:
            return publish(records)
        finally:
            timeline.enter("other")

    def first_guarded(call: Callable[[], Any]) -> Any:
        # The publish's first client call is the sends': the encoding is done by then.
        if timeline._stage == "encode":
            timeline.enter("sign + produce")
        return guarded(call)

    def sending(*args: Any) -> Any:
        timeline.enter("sign + produce")
        try:
            return send_all(*args)
        finally:
            timeline.enter("wait")

    @contextmanager
    def transacting() -> Iterator[Any]:
        timeline.enter("metadata")
        try:
            with transaction() as txn:
                yield txn
        finally:
            timeline.enter("other")

    setattr(mark_module, builder, building)
    publisher.publish = publishing
    publisher._send_all = sending
    publisher._guarded = first_guarded
    store.transaction = transacting
    try:
        yield
    finally:
        setattr(mark_module, builder, build)
        for name in ("publish", "_send_all", "_guarded"):
            delattr(publisher, name)
        del store.transaction


class Bench:
    """One broker topic, one producer per kind (unsigned, signed), a metadata store; marks on demand."""

    def __init__(self, bootstrap: str, work: Path) -> None:
        self.work = work
        prefix, topics = fresh_topics(bootstrap, only_deletion=True)
        self.topic = topics.deletion
        self.codec = build_codec()
        self.producer = RecordProducer(bootstrap, "idempotent-producer")
        self.warm_topic = connect(self.producer, bootstrap, prefix)
        self.signer: RecordSigner = signing_with(Algorithm.HMAC_SHA256).signer
        self.plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                               "linger.ms": 5})
        plain_produce(self.plain, self.warm_topic, [(b"warm", b"warm")])
        self.store = SQLiteMetadataStore(work / f"{prefix}db")
        self.place = FileSystemChunkStorage(work / "tier2", name="fs-tier2")  # locations only, no files

    def mark(self, n: int, signed: bool) -> tuple[float, dict[str, float]]:
        """CPU seconds of one mark of ``n`` new chunks, in all and by stage."""
        chunks = store_rows(self.store, new_chunks(self.place, n))
        publisher = KafkaPendingDeletePublisher(self.producer, self.codec, self.topic,
                                                signer=self.signer if signed else None)
        service = LedgerDeletionService(self.store, publisher)
        self.store.checkpoint()  # none of the WAL's earlier pages checkpointed inside the timed mark
        timeline = Timeline()
        with probed(service, publisher, self.store, timeline):
            started = cpu()
            timeline.enter("other")
            result = service.mark(chunks)
            timeline.close()
            spent = cpu() - started
        assert not result.failed and len(result.marked) == n, f"{len(result.failed)} chunks not confirmed"
        return spent, timeline.spent

    def sign_alone(self, n: int) -> float:
        """CPU seconds of signing ``n`` encoded pending deletes, as the publisher signs them, on their own."""
        pairs = self.records(n)
        started = cpu()
        for key, value in pairs:
            self.signer.headers(self.topic, key, value)
        return cpu() - started

    def plain_produce(self, n: int) -> float:
        """CPU seconds of a plain idempotent producer sending ``n`` encoded pending deletes and flushing."""
        pairs = self.records(n)
        started = cpu()
        plain_produce(self.plain, self.warm_topic, pairs)
        return cpu() - started

    def records(self, n: int) -> list[tuple[bytes, bytes]]:
        infos = pending_deletes_for(new_chunks(self.place, n), new_mark_id(), int(time.time() * 1000))
        return [(info.chunk_name.encode(), self.codec.encode(info, self.topic)) for info in infos]

    def close(self) -> None:
        self.producer.close()
        self.plain.flush(10)
        self.store.close()


def pairs_of(text: str) -> list[tuple[int, int]]:
    try:
        pairs = [tuple(int(n) for n in part.split(":")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of SMALL:LARGE pairs: {text!r}") from None
    if not pairs or any(len(p) != 2 or not 0 < p[0] < p[1] for p in pairs):
        raise argparse.ArgumentTypeError(f"pairs are SMALL:LARGE with 0 < SMALL < LARGE: {text!r}")
    return [(p[0], p[1]) for p in pairs]


def us(seconds: float, n: int) -> float:
    return seconds / n * 1e6


def measure(bench: Bench, pairs: list[tuple[int, int]], rounds: int, figures: Figures) -> None:
    sizes = sorted({n for pair in pairs for n in pair})
    bench.mark(1000, False)  # warm: the codec's compiled encoder, the store's statements, the topic's batches
    bench.mark(1000, True)
    # totals[kind][n] and stages[kind][n][stage]: the rounds' CPU seconds
    totals: dict[str, dict[int, list[float]]] = {k: {n: [] for n in sizes} for k in KINDS}
    stages: dict[str, dict[int, dict[str, list[float]]]] = {k: {n: {s: [] for s in STAGES} for n in sizes}
                                                            for k in KINDS}
    plain: dict[int, list[float]] = {n: [] for n in sizes}
    signing: dict[int, list[float]] = {n: [] for n in sizes}
    for i in range(rounds):
        for n in sizes:
            for kind in KINDS if i % 2 == 0 else reversed(KINDS):  # neither always first
                spent, by_stage = bench.mark(n, kind == "signed")
                totals[kind][n].append(spent)
                for stage, value in by_stage.items():
                    stages[kind][n][stage].append(value)
            plain[n].append(bench.plain_produce(n))
            signing[n].append(bench.sign_alone(n))
    for kind in KINDS:
        print(f"mark, {kind}: CPU µs/record (median of {rounds} rounds), by stage")
        header = "".join(f"{f'{n} w/ start':>15}" for n in sizes) + "".join(
            f"{f'{s}->{large}':>16}" for s, large in pairs)
        print(f"  {'stage':26}{header}")
        rows = [("total", {n: totals[kind][n] for n in sizes})]
        rows += [(stage, {n: stages[kind][n][stage] for n in sizes}) for stage in STAGES]
        if kind == "signed":
            rows.append(("  sign, alone", signing))
        rows.append(("plain produce (context)", plain))
        for label, values in rows:
            medians = {n: statistics.median(values[n]) for n in sizes}
            line = f"  {label:26}"
            slug = label.strip().split(" (")[0].replace(" + ", "_").replace(", ", "_").replace(" ", "_")
            for n in sizes:
                value = us(medians[n], n)
                line += f"{value:15.1f}"
                figures.add(f"mark_{kind}_{slug}_{n}_cpu_us_per_record", value)
            for small, large in pairs:
                marginal = (medians[large] - medians[small]) / (large - small) * 1e6
                line += f"{marginal:16.1f}"
                figures.add(f"mark_{kind}_{slug}_{small}_{large}_marginal_cpu_us_per_record", marginal)
            print(line)
        for small, large in pairs:
            ours = (statistics.median(totals[kind][large]) - statistics.median(totals[kind][small]))
            theirs = statistics.median(plain[large]) - statistics.median(plain[small])
            ratio = theirs / ours
            figures.add(f"mark_{kind}_{small}_{large}_plain_over_mark_marginal_cpu_ratio", ratio)
            print(f"  plain produce / mark, marginal CPU per record, {small}->{large}: {ratio:.2f}x")


def compare(before_file: Path, figures: Figures) -> None:
    """Print every figure of the last ``mark_cpu`` run in ``before_file`` beside this run's, with after/before."""
    runs = [run for run in json.loads(before_file.read_text())["runs"] if run["benchmark"] == "mark_cpu"]
    if not runs:
        raise SystemExit(f"{before_file} holds no mark_cpu run")
    before = runs[-1]["figures"]
    print(f"before ({before_file.name}, {runs[-1]['started']}) -> now, CPU µs/record:")
    for name, value in list(figures.values.items()):
        old = before.get(name)
        if name.endswith("_cpu_us_per_record") and isinstance(old, int | float) and isinstance(value, int | float):
            share = f"{value / old:6.2f}x" if old > 0.05 else "     -"
            print(f"  {name.removeprefix('mark_').removesuffix('_cpu_us_per_record'):58} {old:8.1f} -> {value:8.1f}"
                  f"  {share}")
            figures.add(name.removesuffix("_cpu_us_per_record") + "_before_cpu_us_per_record", old)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=pairs_of, default=[(2000, 10_000), (5000, 20_000)],
                        help="SMALL:LARGE mark sizes for the marginal figures, a comma list "
                             "(default 2000:10000,5000:20000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each every size and kind once (default 3)")
    parser.add_argument("--before", type=Path, help="a results file with an earlier mark_cpu run to compare with")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    begun, figures = time.time(), Figures()
    with tempfile.TemporaryDirectory(prefix="reclaim-bench-") as tmp:
        started: list[int] = []
        try:
            bootstrap = own_broker(Settings.from_env(), Path(tmp), started)
            bench = Bench(bootstrap, Path(tmp))
            try:
                measure(bench, args.pairs, args.rounds, figures)
            finally:
                bench.close()
        finally:
            for pid in started:
                stop_pid(pid)
    if args.before is not None:
        compare(args.before, figures)
    record("mark_cpu", {**vars(args), "run": uuid.uuid4().hex[:8]}, figures, begun)


if __name__ == "__main__":
    main()
