"""In-process retries of transient storage or metadata errors inside one attempt (tenacity)."""

from __future__ import annotations

from dataclasses import dataclass

from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_random_exponential


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded, jittered retries of errors whose ``retryable`` attribute is True.

    At most ``attempts``, and none begun ``max_elapsed`` seconds after the first: a store that hangs
    until its own timeouts (an S3 endpoint behind a partition, ~30 s a request) must not keep a
    consumer thread past the group's poll interval; the record goes to the retry tiers instead.
    """

    attempts: int = 3
    initial_wait: float = 0.05
    max_wait: float = 1.0
    max_elapsed: float = 60.0

    def retrying(self, retry_on: type[BaseException] | tuple[type[BaseException], ...]) -> Retrying:
        return Retrying(
            stop=stop_after_attempt(self.attempts) | stop_after_delay(self.max_elapsed),
            wait=wait_random_exponential(multiplier=self.initial_wait, max=self.max_wait),
            retry=retry_if_exception(lambda exc: isinstance(exc, retry_on) and retryable(exc)),
            reraise=True,
        )


def retryable(exc: BaseException) -> bool:
    return bool(getattr(exc, "retryable", False))
