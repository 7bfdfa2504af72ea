"""reclaim's long-running processes and their wiring: the worker, the truncation applier, the
retention recorder, the retention job's runner, dependency health."""
