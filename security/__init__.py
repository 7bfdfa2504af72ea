"""Authenticated records: keyrings, record signatures and who may sign which record."""
