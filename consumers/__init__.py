"""reclaim: consumers."""
