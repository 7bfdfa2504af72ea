"""reclaim: retention."""
