"""Errors of the security package."""

from __future__ import annotations

from reclaim.errors import ReclaimError


class SecurityError(ReclaimError):
    """A problem with keys or signatures."""


class KeyringError(SecurityError):
    """A keyring file or key that cannot be used; the message is one line naming what is wrong."""


class SigningError(SecurityError):
    """This process has no key to sign a record it must sign."""
