"""Operator tools behind the commands: the dead-letter topic, the audit, topics and ACLs. No argument
parsing here: the commands in :mod:`reclaim.cli` call these."""
