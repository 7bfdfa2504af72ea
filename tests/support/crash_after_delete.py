"""A phase-2 worker process that SIGKILLs itself right after its first storage deletes, before any commit.

Run by ``test_crash.py`` as ``python -m tests.support.crash_after_delete`` with a worker's environment.
"""

from __future__ import annotations

import os
import signal
import threading

from reclaim.deletion.executor import DeletionExecutor
from reclaim.services import runtime
from reclaim.settings import Settings


def main() -> None:
    settings = Settings.from_env()
    original = DeletionExecutor.delete

    def delete_then_die(self: DeletionExecutor, plan):  # type: ignore[no-untyped-def]
        results = original(self, plan)
        if any(result.ok for result in results.values()):
            os.kill(os.getpid(), signal.SIGKILL)
        return results

    DeletionExecutor.delete = delete_then_die  # type: ignore[method-assign]
    store = runtime.metadata_store(settings)
    worker = runtime.deletion_worker(settings, store, runtime.storage_bindings(settings))
    worker.run(threading.Event())


if __name__ == "__main__":
    main()
