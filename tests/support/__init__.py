"""Helpers the tests share that are not fixtures: functions, constants and small classes."""
