"""reclaim's exit codes, and the errors a command raises to stop with one line and one of them."""

from __future__ import annotations

import enum

from reclaim.errors import ReclaimError


class ExitCode(enum.IntEnum):
    """What a ``reclaim`` command's exit status means (the same for every command)."""

    OK = 0
    FINDINGS = 1
    """The command ran and found something to act on (``audit``: orphans, missing or dangling chunks)."""
    UNAVAILABLE = 2
    """It could not do its work: a server, file or topic it needs is unreachable, missing or unusable."""
    UNHEALTHY = 3
    """``local status``: the local stack is stopped, or a part of it is not running or not answering."""
    USAGE = 64
    """Bad input: an unknown flag, a setting value that does not parse, a bad config file."""
    INTERRUPTED = 130
    """Stopped by Ctrl-C before it finished."""
    BROKEN_PIPE = 141
    """The reader of its output went away (``reclaim ... | head``), as a shell reports SIGPIPE."""


EXIT_CODES_HELP = """\
exit status: 0 ok; 1 findings (audit); 2 could not run (a broker, endpoint, store, file or topic it
needs is unreachable, missing or unusable); 3 local stack stopped or unhealthy; 64 bad usage, setting
or config file; 130 interrupted (Ctrl-C); 141 the reader of its output went away."""


class CommandError(ReclaimError):
    """An expected failure of a command: printed as one line, the process exits with ``exit_code``."""

    exit_code: ExitCode = ExitCode.UNAVAILABLE


class Unavailable(CommandError):
    """Something the command needs cannot be reached or used; the message says what and what to do."""

    exit_code = ExitCode.UNAVAILABLE
    retryable = True


class UsageError(CommandError):
    """The command was given input it cannot use; the message names the input."""

    exit_code = ExitCode.USAGE
