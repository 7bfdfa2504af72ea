"""``python -m reclaim.services.worker_child INDEX``: one worker process of a supervised ``reclaim worker``.

The supervisor writes the child's :class:`~reclaim.services.supervisor.ChildSpec` (its settings, how to log)
to its stdin and keeps that pipe open: its end, when the supervisor dies, stops the child cleanly. The
environment is the supervisor's (the config file's settings included), with ``PROMETHEUS_MULTIPROC_DIR``
set before any metric exists.
"""

from __future__ import annotations

import logging
import pickle
import sys

from confluent_kafka import KafkaException

from reclaim.errors import ReclaimError
from reclaim.exits import CommandError, ExitCode
from reclaim.localstack.procs import stop_on_signals
from reclaim.logs import configure_logging
from reclaim.services.supervisor import ChildSpec

log = logging.getLogger("reclaim.services.worker")  # its lines read as a worker's


class _ChildLines(logging.Filter):
    """Marks each line of child ``index`` so that the supervisor's log tells the children apart."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.prefix = f"[worker {index}] "

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and not record.msg.startswith(self.prefix):
            record.msg = self.prefix + record.msg
        return True


def main() -> int:
    # First, before the imports of the worker: a SIGTERM from here on ends in a clean stop.
    stop = stop_on_signals("finishing the batch in flight, then stopping", log.info)
    spec = pickle.load(sys.stdin.buffer)
    if not isinstance(spec, ChildSpec):
        print("reclaim: error: worker_child is started by `reclaim worker --processes N`", file=sys.stderr)
        return ExitCode.USAGE
    configure_logging(json_lines=spec.json_lines)
    root = logging.getLogger()
    root.setLevel(spec.log_level)
    for handler in root.handlers:
        handler.addFilter(_ChildLines(spec.index))
    try:
        from reclaim.services import client_security
        from reclaim.services.worker import run_child

        client_security.install_kafka_properties(spec.settings)
        client_security.registry_connection(spec.settings)
        return run_child(spec.settings, spec.index, sys.stdin.fileno(), stop)
    except CommandError as exc:
        return _fail(str(exc), exc.exit_code)
    except (ReclaimError, KafkaException, OSError) as exc:
        return _fail(" ".join(str(exc).split()) or type(exc).__name__, ExitCode.UNAVAILABLE)


def _fail(message: str, code: int) -> int:
    print(f"reclaim: error: worker {sys.argv[1] if len(sys.argv) > 1 else '?'}: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
