"""reclaim: producers."""
