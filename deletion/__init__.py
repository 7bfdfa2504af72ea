"""reclaim: deletion."""
