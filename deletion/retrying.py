"""In-process retries of transient storage or metadata errors inside one attempt (tenacity)."""

from __future__ import annotations

from dataclasses import dataclass

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded, jittered retries of errors whose ``retryable`` attribute is True."""

    attempts: int = 3
    initial_wait: float = 0.05
    max_wait: float = 1.0

    def retrying(self, retry_on: type[BaseException] | tuple[type[BaseException], ...]) -> Retrying:
        return Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_random_exponential(multiplier=self.initial_wait, max=self.max_wait),
            retry=retry_if_exception(lambda exc: isinstance(exc, retry_on) and retryable(exc)),
            reraise=True,
        )


def retryable(exc: BaseException) -> bool:
    return bool(getattr(exc, "retryable", False))
