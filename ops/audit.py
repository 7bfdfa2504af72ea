"""``reclaim audit``: tier-2 listed against the metadata store, to prove no orphan chunk survives."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice

from segments.backup import LAYOUT_PREFIX
from storage.bindings import StorageBindings
from storage.metadata import MetadataStore

#: Names looked up in the metadata store per query.
PAGE = 1000


@dataclass
class BindingAudit:
    """One binding's objects, by what the metadata store says of them."""

    binding: str
    live: int = 0
    pending: int = 0
    orphans: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.orphans and not self.missing


def audit_binding(store: MetadataStore, bindings: StorageBindings, name: str) -> BindingAudit:
    """Classify every object of binding ``name``: ``live`` (an active chunk row has this copy),
    ``pending`` (its row is inactive: phase 2 has still to delete it), ``orphan`` (no row claims it).
    Also lists ``missing`` copies: active rows of this binding whose object is gone."""
    binding = bindings.get(name)
    result = BindingAudit(name)
    seen: set[str] = set()
    names = (n for n in binding.iter_names() if not n.startswith(LAYOUT_PREFIX))
    while page := list(islice(names, PAGE)):
        rows = store.get_chunks(page)
        for chunk_name in page:
            seen.add(chunk_name)
            row = rows.get(chunk_name)
            if row is None or not any(loc.binding == name for loc in row.locations):
                result.orphans.append(chunk_name)
            elif row.active:
                result.live += 1
            else:
                result.pending += 1
    for segment in store.segment_names():
        for row in store.list_chunks(segment, active_only=True):
            if any(loc.binding == name for loc in row.locations) and row.name not in seen:
                result.missing.append(row.name)
    return result
