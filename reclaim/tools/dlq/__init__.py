"""The dead-letter topic for operators: reading, selecting, rendering, replaying and purging."""
