"""reclaim: storage."""
