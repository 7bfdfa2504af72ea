"""Peak memory of the ``reclaim dlq`` commands over a large dead-letter topic, beside another tree's.

For each of ``--records`` (a comma list of sizes), as many dead letters are produced to a fresh DLQ: pending
deletes of as many chunks, encoded by reclaim's codec, each with the headers the worker's routing writes for a
record it gave up on (a fatal verdict at its last try). Then each command below runs in its own process, this
tree's and, with ``--before-tree DIR``, that unpacked tree's (``git archive REV | tar -x -C DIR``), side by
side in each of ``--rounds``; its peak RSS is the process's own high-water mark (``ru_maxrss``) when it exits:

  - ``purge --all --dry-run``: the plan of dropping every record (nothing dropped);
  - ``stats --stream <no such stream>``: a filter that matches no record;
  - ``stats``: every record matches, and a brief of each is held until the counts are made;
  - ``list --limit 10``: every record matches, and what a listing shows of each is held until they are
    ordered (ten printed);
  - ``replay --rate 1000000``: every record matches and is sent to the deletion topic (as fast as the
    broker confirms them), its replay remembered; the memo topic is made afresh before each run, so every
    run sends them all.

Printed: each command's peak RSS per tree and size (median of the rounds, MB), this tree's over the other's,
and how much each command's peak grew from the smallest size to the largest.

Run: ``.venv/bin/python -m benchmarks.dlq_memory [--records 20000,100000] [--rounds 3] [--before-tree DIR]``.
It starts its own Kafka broker unless RECLAIM_BOOTSTRAP names a running one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

if not __package__:  # run as a file: the sibling modules are imported as ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.deletion_setup import counts, fresh_topics, own_broker  # noqa: E402
from benchmarks.offline_bundle import link_design_folders  # noqa: E402
from benchmarks.results import Figures, record  # noqa: E402
from reclaim.consumers.retry import Delivery, RetryTiers  # noqa: E402
from reclaim.consumers.routing import Route, route  # noqa: E402
from reclaim.deletion.outcomes import Outcome, Verdict  # noqa: E402
from reclaim.localstack.procs import stop_pid  # noqa: E402
from reclaim.producers.producer import RecordProducer  # noqa: E402
from reclaim.producers.topics import TopicNames  # noqa: E402
from reclaim.schemas.codec import build_codec  # noqa: E402
from reclaim.schemas.ledger import (  # noqa: E402
    ChunkLocation,
    LedgerComponent,
    LedgerType,
    PendingDeleteLedgerInfo,
    ledger_id_for,
)
from reclaim.settings import Settings  # noqa: E402
from reclaim.tools.topics import admin_client, create_topics, dlq_replayed_topic, topic_specs  # noqa: E402

COMMANDS = {"purge_all_dry_run": ("purge", "--all", "--dry-run", "--json"),
            "stats_matching_none": ("stats", "--stream", "no/such-stream", "--json"),
            "stats_matching_all": ("stats", "--json"),
            "list_matching_all": ("list", "--limit", "10", "--json"),
            "replay_all": ("replay", "--rate", "1000000", "--json")}
GROUP = "bench-workers"
FATAL = Verdict(Outcome.FATAL, "access denied", "StorageAccessDeniedError")
#: Runs the command line in this process and prints its peak RSS (KiB on Linux) last on stderr.
_MEASURED = ("import atexit, resource, sys\n"
             "atexit.register(lambda: print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
             "file=sys.stderr))\n"
             "from reclaim.cli.main import main\n"
             "sys.exit(main(sys.argv[1:]))\n")


def produce_dead_letters(bootstrap: str, topics: TopicNames, count: int) -> None:
    """``count`` dead letters on ``topics.dlq``, as the worker's routing sends them."""
    codec = build_codec()
    tiers = RetryTiers(topics.retries, max_attempts=3)
    producer = RecordProducer(bootstrap, "idempotent-producer")
    now = int(time.time() * 1000)
    for i in range(count):
        chunk = f"bench/stream/0.#epoch.0.E-1-O-{i}.{i:012d}"
        info = PendingDeleteLedgerInfo("bench/stream", LedgerComponent.SEGMENT, LedgerType.LEDGER, ledger_id_for(chunk),
                                       chunk, "bench/stream/0.#epoch.0", "fs-tier2", ChunkLocation(chunk),
                                       "bench-mark", now)
        delivery = Delivery(3, now - 5000, None, topics.deletion, i % 4, i, now - 9000)
        routing = route(FATAL, delivery, tiers, topics.dlq, now, GROUP)
        assert routing.route is Route.DLQ
        producer.send(topics.dlq, codec.encode(info, topics.dlq), key=chunk.encode(), headers=routing.headers)
        if i % 10_000 == 0:
            producer.producer.poll(0)
    assert producer.producer.flush(60) == 0, "dead letters not all delivered"


def forget_replays(bootstrap: str, prefix: str) -> None:
    """The replay memo topic of ``prefix`` deleted and made again, empty: the next replay sends every record."""
    memos = dlq_replayed_topic(TopicNames.for_prefix(prefix))
    [spec] = [spec for spec in topic_specs(Settings(topic_prefix=prefix)) if spec.name == memos]
    admin = admin_client(bootstrap)
    admin.delete_topics([memos], request_timeout=30)[memos].result(timeout=30)
    deadline = time.monotonic() + 60
    while create_topics(admin, [spec])[memos] != "created":  # "exists" while its deletion completes
        if time.monotonic() > deadline:
            raise SystemExit(f"{memos} was not made again within 60 s")
        time.sleep(0.5)


def peak_rss_mb(tree: Path | None, env: dict[str, str], args: tuple[str, ...], work: Path) -> float:
    """The peak RSS of ``reclaim dlq <args>`` run from ``tree`` (this one when None), in MB. It runs in
    ``work``: ``python -c`` puts its working directory first on the path, so a checkout's would win."""
    if tree is not None:
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _MEASURED, "dlq", *args], capture_output=True, text=True, env=env,
                          cwd=work, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"reclaim dlq {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    kib = int(done.stderr.strip().splitlines()[-1].split()[-1])
    return kib / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=counts, default=[20_000, 100_000],
                        help="DLQ sizes, a comma list (default 20000,100000)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each command per tree (default 3)")
    parser.add_argument("--before-tree", type=Path, help="an unpacked tree of another commit to run beside this one")
    args = parser.parse_args()
    if args.before_tree and not (args.before_tree / "pyproject.toml").is_file():
        parser.error(f"--before-tree {args.before_tree}: no pyproject.toml there (not an unpacked tree of reclaim)")
    started, figures = time.time(), Figures()
    trees: dict[str, Path | None] = {"this tree": None}
    if args.before_tree:
        trees = {"before": link_design_folders(args.before_tree.resolve()), **trees}
    launched: list[int] = []
    peaks: dict[tuple[int, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="reclaim-dlq-memory-") as work:
        try:
            bootstrap = own_broker(Settings.from_env(), Path(work), launched)
            for size in args.records:
                prefix, topics = fresh_topics(bootstrap)
                produce_dead_letters(bootstrap, topics, size)
                env = {**{k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")},
                       "RECLAIM_BOOTSTRAP": bootstrap, "RECLAIM_TOPIC_PREFIX": prefix,
                       "RECLAIM_STATE_DIR": str(Path(work) / "state")}
                for round_number in range(args.rounds):
                    order = list(trees.items()) if round_number % 2 == 0 else list(reversed(trees.items()))
                    for name, command in COMMANDS.items():
                        for label, tree in order:
                            if command[0] == "replay":
                                forget_replays(bootstrap, prefix)
                            peak = peak_rss_mb(tree, env, command, Path(work))
                            peaks.setdefault((size, name, label), []).append(peak)
        finally:
            for pid in launched:
                stop_pid(pid)
    print(f"reclaim dlq: peak RSS, MB (median of {args.rounds} rounds)")
    for name, command in COMMANDS.items():
        print(f"  dlq {' '.join(command)}")
        for size in args.records:
            row = {label: median(peaks[(size, name, label)]) for label in trees}
            for label, value in row.items():
                figures.add(f"dlq_{name}_{size}_{label.replace(' ', '_')}_peak_rss_mb", round(value, 1))
            shown = "  ".join(f"{label} {value:7.1f}" for label, value in row.items())
            ratio = ""
            if "before" in row:
                ratio = f"  this tree / before {row['this tree'] / row['before']:.2f}x"
                figures.add(f"dlq_{name}_{size}_over_before_ratio", round(row["this tree"] / row["before"], 3))
            print(f"    {size:>9} records: {shown}{ratio}")
        if len(args.records) > 1:
            low, high = min(args.records), max(args.records)
            for label in trees:
                grew = median(peaks[(high, name, label)]) - median(peaks[(low, name, label)])
                figures.add(f"dlq_{name}_{label.replace(' ', '_')}_growth_mb", round(grew, 1))
                print(f"    {label}: +{grew:.1f} MB from {low} to {high} records")
    record("dlq_memory", vars(args), figures, started)


if __name__ == "__main__":
    main()
