"""reclaim: segments."""
