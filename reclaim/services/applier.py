"""``reclaim truncation-applier``: the controller's side of retention as a process. Truncation events are
applied to streams (:class:`~reclaim.consumers.truncation_applier.TruncationApplier`) and, every retention
period, each stream's tail cut is recorded (:class:`~reclaim.services.recorder.RetentionRecorder`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from reclaim.consumers.truncation_applier import ApplierConfig, TruncationApplier
from reclaim.localstack.procs import exit_status, stop_on_signals
from reclaim.services import preflight, runtime
from reclaim.services.controller import stream_controller
from reclaim.services.recorder import RetentionRecorder
from reclaim.settings import Settings

log = logging.getLogger(__name__)


def run_applier(settings: Settings, *, metrics_addr: str = "127.0.0.1") -> int:
    """Apply truncation events until SIGTERM (exit 0) or SIGINT (Ctrl-C, exit 130), recording every stream's cut
    each ``record_every_s``."""
    runtime.require_record_auth(settings, "the truncation applier")
    topics, address = runtime.topic_names(settings), preflight.bootstrap(settings)
    # A topic that is not there (another --topic-prefix) left the applier polling nothing, without end.
    preflight.require_topics(address, [topics.truncation] + ([topics.stream_cuts] if settings.record_every_s > 0
                                                             else []))
    stop = stop_on_signals("finishing the event in hand, then stopping", log.info)
    if settings.metrics_port is not None:
        preflight.serve_metrics(settings.metrics_port, metrics_addr)
    with stream_controller(settings) as (controller, publisher):
        config = ApplierConfig(address, topics.truncation, settings.truncation_group_id,
                               poll_timeout_s=settings.poll_timeout_s)
        applier = TruncationApplier(config, controller, runtime.codec(settings),
                                    verifier=runtime.record_verifier(settings))
        tick: Callable[[], object] | None = None
        if settings.record_every_s > 0:
            period_ms = int(settings.record_every_s * 1000)
            tick = RetentionRecorder(controller, publisher, topics.stream_cuts, period_ms).tick
        log.info("truncation applier on %s (group %s); recording cuts %s", topics.truncation,
                 settings.truncation_group_id,
                 f"every {settings.record_every_s:g} s" if settings.record_every_s > 0 else "never")
        applier.run(stop, on_idle=tick)
    return exit_status(0, stop)
