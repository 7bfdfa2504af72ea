"""The library page's examples, read from the docs, and a chunk row an application would have registered."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from reclaim.settings import Settings
from reclaim.storage.chunks import ChunkTags
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord
from reclaim.storage.sql_store import open_metadata_store
from tests.support.paths import REPO

LIBRARY_PAGE = REPO / "docs" / "reference" / "library.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def examples(language: str, page: Path = LIBRARY_PAGE) -> list[str]:
    """The page's code blocks in ``language``, in the order a reader meets them."""
    return [body for lang, body in _BLOCK.findall(page.read_text()) if lang == language]


def config_file(directory: Path, **values: str) -> Path:
    """The page's ``reclaim.toml`` in ``directory``, with ``values`` (the test's broker, a fresh prefix) in place
    of the page's."""
    (page_toml,) = examples("toml")
    settings = tomllib.loads(page_toml) | values
    path = directory / "reclaim.toml"
    path.write_text("".join(f"{key} = \"{value}\"\n" for key, value in settings.items()))
    return path


def register_chunk(settings: Settings, name: str, data: bytes = b"ledger bytes") -> None:
    """A chunk that an application wrote to the filesystem tier-2 and registered under a segment of its own
    (no segment row: no live layout holds it)."""
    segment = name.rsplit(".", 1)[0]
    tags = ChunkTags(component="ledger", stream=segment.rsplit("/", 1)[0], segment=segment, writer_epoch=1)
    binding = FileSystemChunkStorage(settings.fs_tier2_root, name="fs-tier2", create=True)
    binding.create_with_content(name, data, tags)
    store = open_metadata_store(settings.metadata_location)
    try:
        with store.transaction() as txn:
            txn.put_chunk(ChunkRecord(name=name, segment=segment, start_offset=0, length=len(data), tags=tags,
                                      locations=(binding.location(name),)))
    finally:
        store.close()
        binding.close()


def tier2_names(settings: Settings) -> set[str]:
    """The chunks the filesystem tier-2 holds now."""
    binding = FileSystemChunkStorage(settings.fs_tier2_root, name="fs-tier2", create=False)
    try:
        return set(binding.iter_names())
    finally:
        binding.close()
