"""A stream's subscribers (PDP-47): membership by generation, and each one's latest truncation cut."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from reclaim.retention.errors import GenerationAheadError, StaleGenerationError, UnknownSubscriberError
from reclaim.schemas.streams import StreamCut


@dataclass(frozen=True)
class Subscriber:
    """One reader group's standing: its generation, whether it is subscribed, and its last accepted cut."""

    name: str
    generation: int
    active: bool
    cut: StreamCut | None = None
    signed_by: str | None = None
    """Who signed its last accepted cut (``role:subject/key-id``); None when unsigned or not verified."""


class SubscriberRegistry:
    """Subscribers of one stream. A change or cut with an older generation than the stored one is refused.

    Removed subscribers stay as tombstones with their generation, so a late add of an older
    generation cannot bring them back; their cut is forgotten and holds nothing back.

    Examples
    --------
    >>> registry = SubscriberRegistry()
    >>> registry.add("billing", 1)
    >>> registry.remove("billing", 2)
    >>> registry.active_cuts()
    []
    """

    def __init__(self, subscribers: Mapping[str, Subscriber] | None = None) -> None:
        self._subscribers: dict[str, Subscriber] = dict(subscribers or {})

    def __iter__(self) -> Iterator[Subscriber]:
        return iter(sorted(self._subscribers.values(), key=lambda s: s.name))

    def get(self, name: str) -> Subscriber | None:
        return self._subscribers.get(name)

    def _check_newer(self, name: str, generation: int, what: str) -> Subscriber | None:
        current = self._subscribers.get(name)
        if current is not None and generation <= current.generation:
            raise StaleGenerationError(f"{what} of subscriber {name!r} at generation {generation} is not newer "
                                       f"than its generation {current.generation}")
        return current

    def add(self, name: str, generation: int) -> None:
        """Subscribe ``name`` at ``generation``; re-adding a subscribed one keeps its cut."""
        current = self._check_newer(name, generation, "add")
        keep = current.cut if current is not None and current.active else None
        signer = current.signed_by if keep is not None and current is not None else None
        self._subscribers[name] = Subscriber(name, generation, True, keep, signer)

    def remove(self, name: str, generation: int) -> None:
        """Unsubscribe ``name``: it no longer holds truncation back."""
        self._check_newer(name, generation, "remove")
        self._subscribers[name] = Subscriber(name, generation, False, None)

    def subscribed(self, name: str, generation: int) -> Subscriber:
        """The subscriber a cut of ``name`` at ``generation`` belongs to, or why there is none."""
        current = self._subscribers.get(name)
        if current is None:
            raise UnknownSubscriberError(f"subscriber {name!r} was never added")
        if generation < current.generation:
            raise StaleGenerationError(f"cut of subscriber {name!r} at generation {generation} is older than "
                                       f"its generation {current.generation}")
        if generation > current.generation:
            raise GenerationAheadError(f"cut of subscriber {name!r} at generation {generation} is ahead of its "
                                       f"generation {current.generation}: no add at {generation} was seen")
        if not current.active:
            raise UnknownSubscriberError(f"subscriber {name!r} was removed at generation {current.generation}")
        return current

    def set_cut(self, name: str, cut: StreamCut, signed_by: str | None = None) -> None:
        """Store an accepted cut (the caller checked its generation, validity and that it advances), and who
        signed it (None: keep who signed the cut it replaces, as when a cut is held to a sealed length)."""
        current = self._subscribers[name]
        self._subscribers[name] = replace(current, cut=cut, signed_by=signed_by or current.signed_by)

    def holding(self) -> list[Subscriber]:
        """The subscribed subscribers that hold a cut: those whose cuts make the lower bound."""
        return [s for s in self if s.active and s.cut is not None]

    def active_cuts(self) -> list[StreamCut]:
        """The cuts that hold truncation back: subscribed subscribers' cuts, by name; none yet holds nothing."""
        return [s.cut for s in self if s.active and s.cut is not None]
