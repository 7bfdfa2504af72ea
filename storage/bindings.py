"""``StorageBindings``: the registry that finds a chunk storage binding by the name a record carries."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from reclaim.storage.chunks import ChunkLocation, ChunkStorage, Tier
from reclaim.storage.errors import StorageMisconfiguredError


class StorageBindings:
    """Bindings by name (``"fs-tier2"``, ``"s3-tier2"``, ...); names are unique."""

    def __init__(self, bindings: Iterable[ChunkStorage] = ()) -> None:
        self._by_name: dict[str, ChunkStorage] = {}
        for binding in bindings:
            self.register(binding)

    def register(self, binding: ChunkStorage) -> None:
        """Add ``binding``; a second binding with the same name is a configuration error."""
        if binding.name in self._by_name:
            raise StorageMisconfiguredError(f"storage binding {binding.name!r} registered twice",
                                            binding=binding.name)
        self._by_name[binding.name] = binding

    def get(self, name: str) -> ChunkStorage:
        """The binding called ``name``; fatal :class:`StorageMisconfiguredError` when none is."""
        try:
            return self._by_name[name]
        except KeyError:
            raise StorageMisconfiguredError(f"no storage binding named {name!r}", binding=name) from None

    def for_location(self, location: ChunkLocation) -> ChunkStorage:
        """The binding holding ``location``; its bucket and tier must match the binding's."""
        binding = self.get(location.binding)
        if binding.bucket != location.bucket or binding.tier is not location.tier:
            raise StorageMisconfiguredError(
                f"location {location} does not match binding {binding.name!r} "
                f"(bucket {binding.bucket!r}, tier {binding.tier.value})", binding=binding.name)
        return binding

    def by_tier(self, tier: Tier) -> list[ChunkStorage]:
        """Every binding configured at ``tier``, in registration order."""
        return [binding for binding in self._by_name.values() if binding.tier is tier]

    def check(self) -> None:
        """Prove every binding can serve (its bucket or root exists); raises the first failure."""
        for binding in self._by_name.values():
            binding.check()

    def names(self) -> list[str]:
        return list(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[ChunkStorage]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def close(self) -> None:
        """Close every binding."""
        for binding in self._by_name.values():
            binding.close()
