"""Phase 2 on one host with 1, 2 and 4 worker processes: per-process throughput, its spread, start and stop apart.

Each round drains one backlog per process count, in the same order every round (1, 2, 4, 1, 2, 4, ...),
then times raw ``DeleteObjects`` (1000 keys a request; a raw ``os.unlink`` loop with ``--fs``) over as
many objects. A drain:

1. fresh topics (``--partitions``, 8 by default, at least the largest process count), a fresh bucket
   holding the objects and a fresh SQLite metadata store holding their rows (not timed);
2. the workers started: one ``reclaim worker --processes N`` (a supervisor and its N children, one group)
   or N separate ``reclaim worker`` processes of one group (``--modes``); timed until the group is stable
   with N members each holding partitions (*join*, printed on its own);
3. the workers stopped (SIGSTOP to each process group) while phase 1 (``LedgerDeletionService.mark``)
   publishes the pending deletes and commits the mark, so no record is read before all are on the topic
   and no rebalance falls inside the drain (the stop is printed; past the consumers' 10 s session
   timeout a member leaves, which the run reports as a rebalanced round);
4. SIGCONT, and the drain watched from outside the workers (:mod:`benchmarks.drain_watch`): their
   counters read every ``--scrape-ms`` (10) from prometheus-client's multiprocess files, which a
   supervisor's children write anyway and an unsupervised worker is told to (``PROMETHEUS_MULTIPROC_DIR``),
   so that no process count pays for being watched (scraping a supervisor's endpoint, which sums every
   child's files again, cost the workers several ms of CPU a scrape); the group's committed offsets
   polled every ``--scrape-ms`` once every object is deleted; CPU time of the workers, of the broker and
   S3 server ("servers"), of this process (the watcher) and of the whole machine read from ``/proc``.
   Afterwards the bucket must be empty, the group's lag 0, its members the same (else the round is
   marked as rebalanced), every outcome ``deleted`` and no key listed (a listed round took the path of
   records read again).

From the timestamps: *start* = first record polled -> first objects deleted (the first batched delete
answered and its rows dropped); *steady* = the objects deleted after that, over the time until the last
one is deleted; *stop* = last object deleted -> every offset committed; *drain* = first record polled ->
every offset committed, which the ratio to raw uses. The workers run with their deployed settings
(commit interval 1 s, batches of 1000) unless ``--commit-interval-ms`` says otherwise.

Run: ``.venv/bin/python -m benchmarks.worker_scaling [--objects 20000] [--rounds 3] [--processes 1,2,4]
[--minio | --fs]``. It starts its own Kafka broker and S3 endpoint (moto, or MinIO with ``--minio``)
unless RECLAIM_BOOTSTRAP / RECLAIM_S3_ENDPOINT name running ones.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the sibling modules are imported as ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.deletion_setup import counts, own_broker  # noqa: E402
from benchmarks.results import Figures, record  # noqa: E402
from benchmarks.scaling_drain import MODES, Drain, Tier2, drain, modes_available, raw_seconds  # noqa: E402
from reclaim.localstack.procs import stop_pid  # noqa: E402
from reclaim.settings import Settings  # noqa: E402

STALL_S = 120.0


def spread(values: Sequence[float]) -> float:
    """(max - min) / median; 0 when the median is 0 (a CPU time under one clock tick, say)."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


def stats_line(figures: Figures, name: str, label: str, values: Sequence[float], unit: str, digits: int) -> float:
    """Print and record the median, min, max and spread of ``values`` (one per round); returns the median."""
    middle = statistics.median(values)
    figures.add(f"{name}_median_{unit}", middle)
    figures.add(f"{name}_min_{unit}", min(values))
    figures.add(f"{name}_max_{unit}", max(values))
    figures.add(f"{name}_spread", spread(values))
    if len(values) > 1:
        figures.add(f"{name}_rounds_{unit}", ", ".join(f"{v:.{digits}f}" for v in values))
    print(f"    {label:34} median {middle:9.{digits}f}  min {min(values):9.{digits}f}  max {max(values):9.{digits}f}"
          f"  spread {spread(values):5.1%}")
    return middle


def round_line(drain_: Drain, mode: str) -> str:
    """One drain in two lines: its spans, then its resolution and CPU."""
    d, each = drain_, drain_.steady_per_s / drain_.processes
    workers_us, servers_us = d.worker_cpu_s / d.objects * 1e6, d.server_cpu_s / d.objects * 1e6
    watcher_us = d.watcher_cpu_s / d.objects * 1e6
    supervisor = f" (the supervisor {d.supervisor_cpu_s / d.objects * 1e6:.0f})" if d.supervisor_cpu_s else ""
    flag = "  REBALANCED (a member left: this round includes a rebalance)" if d.rebalanced else ""
    flag += f"  {d.not_deleted} records with another outcome than deleted" if d.not_deleted else ""
    flag += f"  LISTED ({d.listings} existence listings: records taken for read again)" if d.listings else ""
    spans = (f"join {d.join_s:5.2f} s | stopped {d.stopped_s:4.2f} s | wake {d.wake_s:5.3f} | start {d.start_s:5.3f} "
             f"| steady {d.steady_per_s:7,.0f}/s ({each:6,.0f}/s each) | stop {d.stop_s:5.3f} "
             f"| drain {d.drain_s:6.3f} s")
    cpu = (f"±{d.resolution_s * 1000:3.0f} ms (sweeps {d.sweep_ms:3.0f} ms apart); CPU per record: workers "
           f"{workers_us:4.0f} µs{supervisor}, servers {servers_us:4.0f} µs, this watcher {watcher_us:3.0f} µs; "
           f"machine {d.machine_cores:4.2f} cores busy; a batched delete {d.delete_request_s * 1000:4.0f} ms; "
           f"laid out in {d.layout_s:.0f} s")
    return f"    {d.processes} process{'es' if d.processes > 1 else '  '} ({mode}): {spans}{flag}\n{'':30}{cpu}"


def summarize(figures: Figures, key: str, n: int, drains: list[Drain], raw: list[float]) -> float:
    """Print and record one process count's figures over its rounds; returns its median steady rate."""
    procs = drains[0].processes
    print(f"  {procs} process{'es' if procs > 1 else ''}, {len(drains)} round(s):")
    steady = stats_line(figures, f"{key}_steady", "steady objects/s, all processes", [d.steady_per_s for d in drains],
                        "objects_per_s", 0)
    stats_line(figures, f"{key}_steady_per_process", "steady objects/s per process",
               [d.steady_per_s / procs for d in drains], "objects_per_s", 0)
    stats_line(figures, f"{key}_drain", "drain s (first polled -> committed)", [d.drain_s for d in drains], "s", 3)
    stats_line(figures, f"{key}_start", "start s (first polled -> deleted)", [d.start_s for d in drains], "s", 3)
    stats_line(figures, f"{key}_stop", "stop s (last deleted -> committed)", [d.stop_s for d in drains], "s", 3)
    stats_line(figures, f"{key}_join", "join s (started -> group stable)", [d.join_s for d in drains], "s", 2)
    stats_line(figures, f"{key}_wake", "wake s (SIGCONT -> first polled)", [d.wake_s for d in drains], "s", 3)
    stats_line(figures, f"{key}_delete_request", "one batched delete, mean s", [d.delete_request_s for d in drains],
               "s", 3)
    stats_line(figures, f"{key}_worker_cpu", "worker CPU µs/record", [d.worker_cpu_s / n * 1e6 for d in drains],
               "us_per_record", 0)
    if any(d.supervisor_cpu_s for d in drains):
        stats_line(figures, f"{key}_supervisor_cpu", "  of it the supervisor, µs/record",
                   [d.supervisor_cpu_s / n * 1e6 for d in drains], "us_per_record", 0)
    stats_line(figures, f"{key}_server_cpu", "servers' CPU µs/record",
               [d.server_cpu_s / n * 1e6 for d in drains], "us_per_record", 0)
    stats_line(figures, f"{key}_machine", "whole machine, cores busy", [d.machine_cores for d in drains], "cores", 2)
    figures.ratio(f"{key}_over_raw", f"{procs}p drain / raw:", [d.drain_s for d in drains], raw)
    figures.add(f"{key}_rebalanced_rounds", sum(d.rebalanced for d in drains))
    return steady


def header(args: argparse.Namespace, tier2: Tier2, modes: list[str]) -> None:
    cores = os.cpu_count() or 1
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"phase-2 scaling on one host: {cores} cores (load average {load} at the start), {tier2.name}, "
          f"{args.objects} objects of 64 bytes per drain, {args.partitions} partitions, workers as deployed "
          f"(batches of 1000, commit interval {args.commit_interval_ms or 1000} ms); processes "
          f"{', '.join(map(str, args.processes))} in {args.rounds} interleaved round(s); modes: {', '.join(modes)}")
    print(f"  timestamps: this process's perf_counter at the end of the first read of the workers' counters "
          f"(their multiprocess files, every {args.scrape_ms} ms, summed over processes) or of the first committed() "
          "poll (every "
          f"{args.scrape_ms} ms once all is deleted) that showed the change; ± = how much earlier it may have "
          "happened (back to the start of the sweep or poll before), the widest in the drain. 'first polled': "
          "reclaim_deletion_messages_received_total > 0; 'deleted': reclaim_ledgers_deleted_total (a batch "
          "counts once its delete was answered and its rows dropped; no metric marks a delete being sent, so "
          "the mean batched delete is printed too); 'committed': every partition's committed offset at its end")
    if cores <= 2:
        print(f"  NOTE: {cores} cores, shared by the workers with the Kafka broker and the S3 server: 2 and 4 "
              "processes get no core of their own, so their figures are bounded by the cores and do not say what "
              "a host with more cores would give")


def drain_again_on_failure(bootstrap: str, tier2: Tier2, mode: str, procs: int, n: int, work: Path,
                           args: argparse.Namespace, servers: list[int]) -> Drain:
    """One drain; a drain that fails its checks (a stall, objects left) is said so and run once more, so that
    one bad drain does not lose the rounds before it."""
    try:
        return drain(bootstrap, tier2, mode, procs, n, work, args, servers)
    except AssertionError as exc:
        print(f"    {procs} process(es): the drain failed, run again: {str(exc).splitlines()[0]}", flush=True)
        return drain(bootstrap, tier2, mode, procs, n, work, args, servers)


def run_rounds(args: argparse.Namespace, bootstrap: str, tier2: Tier2, modes: list[str], work: Path,
               figures: Figures, servers: list[int]) -> None:
    """Warm-up, then the interleaved rounds; prints each drain, then the figures of each mode and count."""
    n = args.objects
    if args.warmup:
        print(f"  warm-up ({args.warmup} objects each, not counted)")
        for mode in modes:
            for procs in args.processes:
                drain(bootstrap, tier2, mode, procs, args.warmup, work, args, servers)
        raw_seconds(tier2, args.warmup, work)
    drains: dict[tuple[str, int], list[Drain]] = {(m, p): [] for m in modes for p in args.processes}
    raw: list[float] = []
    for i in range(args.rounds):
        print(f"  round {i + 1}:")
        for mode in modes:
            for procs in args.processes:
                done = drain_again_on_failure(bootstrap, tier2, mode, procs, n, work, args, servers)
                drains[(mode, procs)].append(done)
                print(round_line(done, mode), flush=True)
        raw.append(raw_seconds(tier2, n, work))
        print(f"  raw {tier2.raw_name}: {raw[-1]:.3f} s ({n / raw[-1]:,.0f} objects/s)", flush=True)
    key = f"scaling_{tier2.name.lower()}_{n}"
    print("figures (median, min, max over the rounds; spread = (max - min) / median):")
    figures.rate(f"{key}_raw", f"raw {tier2.raw_name}", n, raw)
    for mode in modes:
        print(f"{mode}:")
        steady = {p: summarize(figures, f"{key}_{mode}_{p}p", n, drains[(mode, p)], raw) for p in args.processes}
        base = args.processes[0]
        for procs in args.processes[1:]:
            gain = steady[procs] / steady[base]
            figures.add(f"{key}_{mode}_{procs}p_over_{base}p_steady_ratio", gain)
            figures.ratio(f"{key}_{mode}_{procs}p_over_{base}p_drain", f"speed-up {procs}p / {base}p, drain:",
                          [d.drain_s for d in drains[(mode, procs)]], [d.drain_s for d in drains[(mode, base)]])
            print(f"  speed-up {procs} / {base} processes, steady median: {gain:.2f}x "
                  f"(per process {gain * base / procs:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=20_000, help="objects per drain (default 20000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each draining once per process count "
                        "(default 3)")
    parser.add_argument("--processes", type=counts, default=[1, 2, 4], help="process counts, a comma list "
                        "(default 1,2,4; the first is the base of the speed-ups)")
    parser.add_argument("--modes", type=lambda s: [m.strip() for m in s.split(",") if m.strip()], default=None,
                        help=f"how the processes are started, a comma list of {', '.join(MODES)} (default: "
                        "supervisor where `reclaim worker --processes` exists, else separate)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the deletion topic (default 8)")
    parser.add_argument("--warmup", type=int, default=1000, help="objects of an untimed drain per process count "
                        "first (default 1000; 0: none)")
    parser.add_argument("--scrape-ms", type=int, default=10, help="how often the workers' counters are read, and "
                        "the group's committed offsets once every object is deleted (default 10)")
    parser.add_argument("--settle-s", type=float, default=2.0, help="how long the workers run after their group "
                        "is stable before they are stopped: time to take their partitions (default 2)")
    parser.add_argument("--commit-interval-ms", type=int, help="the workers' commit interval (default: theirs, 1000)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--minio", action="store_true", help="objects on a MinIO server started here")
    where.add_argument("--fs", action="store_true", help="chunks on the filesystem binding (raw: os.unlink loop)")
    args = parser.parse_args()
    if args.rounds < 1 or args.objects < 1:
        parser.error("--rounds and --objects must be at least 1")
    if max(args.processes) > args.partitions:
        parser.error(f"--partitions {args.partitions} is below {max(args.processes)} processes: some would idle")
    available = modes_available()
    modes = args.modes or [available[0]]
    unknown = sorted(set(modes) - set(available))
    if unknown:
        parser.error(f"mode {unknown[0]!r} is not available here (available: {', '.join(available)})")
    settings = Settings.from_env()
    begun, figures = time.time(), Figures()
    figures.add("cores", os.cpu_count() or 1)
    figures.add("load_average_1m_at_start", os.getloadavg()[0])
    with tempfile.TemporaryDirectory(prefix="reclaim-bench-") as tmp:
        work = Path(tmp)
        started: list[int] = []
        try:
            bootstrap = own_broker(settings, work, started)
            tier2 = Tier2.start(settings, "fs" if args.fs else "minio" if args.minio else "moto", work, started)
            header(args, tier2, modes)
            run_rounds(args, bootstrap, tier2, modes, work, figures, started)
        finally:
            for pid in started:
                stop_pid(pid)
    record("worker_scaling", {**vars(args), "modes": modes}, figures, begun)


if __name__ == "__main__":
    main()
