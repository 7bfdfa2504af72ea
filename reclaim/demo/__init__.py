"""``reclaim demo``: the end-to-end run on the local stack."""
