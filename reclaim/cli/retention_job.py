"""``reclaim retention-job``: the Spark retention query as a process (:mod:`reclaim.services.retention_job`)."""

from __future__ import annotations

import argparse
import sys

from reclaim.cli.common import Common, duration, metrics_flags
from reclaim.logs import log_as_service
from reclaim.retention.spark_output import spark_log_path
from reclaim.services.retention_job import RetentionJobSettings, run_retention_job
from reclaim.settings import Settings

DESCRIPTION = """\
Read the retention inputs (stream topology, stream config, subscribers, subscriber cuts, recorded
stream cuts) from the earliest offsets, keep one retention state per stream in Spark's state store,
and write a TruncationEvent to the truncation topic whenever a stream's truncation cut advances;
inputs that cannot be decoded or are refused go to the retention-rejects topic. The job resumes from
its checkpoint. With --once it processes what is on the topics now (and any stream whose
re-evaluation is due) and exits; otherwise it runs until SIGTERM/SIGINT (a batch cut short is redone
on restart; the truncation applier ignores the duplicate events that can cause).

On a Spark cluster (--master spark://..., yarn, k8s://...) the executors need not have reclaim
installed: the job ships it to them. Their Python (--executor-python) must be the driver's Python
version with pandas, pyarrow, fastavro, cryptography and prometheus-client installed. A checkpoint on
an object store (s3a://) gets Hadoop's s3a connector from Maven Central.
"""


def cmd_retention_job(args: argparse.Namespace, settings: Settings) -> int:
    if not args.once:
        log_as_service()
    job = RetentionJobSettings.of(settings, args)
    return run_retention_job(job, once=args.once, metrics_addr=args.metrics_addr,
                             spark_log=spark_log_path(job.state_dir), say=lambda line: print(line, flush=True),
                             tell=lambda line: print(f"reclaim: {line}", file=sys.stderr, flush=True))


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    """Add ``reclaim retention-job`` to the command line."""
    job = sub.add_parser("retention-job", help="run the Spark retention job: truncation events from subscribers' "
                                               "cuts, policies and recorded cuts", description=DESCRIPTION,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    job.add_argument("--checkpoint", help="Spark checkpoint path or URI; holds the offsets read and every stream's "
                                          "state; an s3a://BUCKET/PATH is reached with the S3 settings "
                                          "(RECLAIM_S3_ENDPOINT, RECLAIM_S3_ACCESS_KEY, ...) "
                                          "(RECLAIM_CHECKPOINT, default <state-dir>/retention-checkpoint)")
    job.add_argument("--master", help="Spark master URL, e.g. local[4], spark://host:7077, yarn; on a cluster, "
                                      "reclaim's code is shipped to the executors (RECLAIM_MASTER, default local[*])")
    job.add_argument("--executor-python", help="Python on a cluster's executors, with pandas, pyarrow, fastavro, "
                                               "cryptography and prometheus-client (not reclaim) "
                                               "(RECLAIM_EXECUTOR_PYTHON, default PYSPARK_PYTHON, else python3)")
    job.add_argument("--trigger-interval-s", type=duration(positive=True), metavar="DURATION",
                     help="time between micro-batches (RECLAIM_TRIGGER_INTERVAL_S, default 5s)")
    job.add_argument("--reevaluate-s", type=duration(positive=True), metavar="DURATION",
                     help="longest wait before a stream whose time limits can fire is decided again without new "
                          "input (it is also decided at the instant one fires) (RECLAIM_REEVALUATE_S, default 30s)")
    job.add_argument("--state-buckets", type=int,
                     help="state buckets the streams are spread over; fixed by the first checkpoint "
                          "(RECLAIM_STATE_BUCKETS, default 64)")
    job.add_argument("--once", action="store_true",
                     help="process what is on the input topics now, then exit (e.g. from cron)")
    metrics_flags(job)
    common(job)
    job.set_defaults(run=cmd_retention_job)
