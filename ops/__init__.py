"""reclaim: ops."""
