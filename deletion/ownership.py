"""How a chunk copy maps onto PIP-186's record fields: ledger type by tier, component by tag.

Phase 1 builds records with these maps and phase 2 checks records against them; both import them
from here, so neither depends on the other.
"""

from __future__ import annotations

import functools

from reclaim.schemas.ledger import LedgerComponent, LedgerType
from reclaim.storage.chunks import Tier

#: PIP-186's ledger type follows the tier of the copy a record names.
LEDGER_TYPES = {Tier.TIER1: LedgerType.LEDGER, Tier.TIER2: LedgerType.OFFLOAD_LEDGER}
#: ``LEDGER_TYPES`` by the tier's name, for the per-record paths: an enum member hashes in Python code,
#: its name in C.
LEDGER_TYPE_OF_TIER_NAME = {tier.name: ledger_type for tier, ledger_type in LEDGER_TYPES.items()}


@functools.lru_cache(maxsize=64)
def component_of(tag: str) -> LedgerComponent:
    """The record's component for a chunk's ``component`` tag; unknown tags are segment data.

    Remembered for the last 64 tags: phase 1 maps and phase 2 checks every chunk's tag, and the chunks
    of a batch share a handful (an enum's lookup by name runs Python code)."""
    try:
        return LedgerComponent[tag.upper()]
    except KeyError:
        return LedgerComponent.SEGMENT
