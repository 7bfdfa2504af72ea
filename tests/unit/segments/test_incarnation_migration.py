"""A controller store of the version before incarnations is migrated: each stream gets an incarnation of its
own, and a journal entry written before its stream was created (a deleted namesake's) gets none."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reclaim.segments.controller_store import MIGRATIONS, STORE, StreamMetadataStore
from reclaim.storage.sqlite_base import SQLiteDatabase


def test_streams_of_an_earlier_version_get_incarnations_and_old_journal_entries_none(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    SQLiteDatabase(str(path), MIGRATIONS[:3], store=STORE, busy_timeout=1.0).close()
    with sqlite3.connect(path) as raw:
        for name, created in (("s/a", 100.0), ("s/b", 100.0)):
            raw.execute("INSERT INTO controller_streams VALUES (?, 1, 's', ?, ?, 'ACTIVE', 0, '0', 0, ?)",
                        (name, name[2:], '{"retention_type": "NONE", "limit_type": null, "min_limit": 0, '
                         '"max_limit": 9223372036854775807}', created))
        for source, at in (("before", 50.0), ("after", 150.0)):
            raw.execute("INSERT INTO controller_truncations VALUES ('s/a', ?, '[]', 'MANUAL', 'admin/a', 'applied', ?)",
                        (source, at))
    store = StreamMetadataStore(path)
    try:
        a, b = store.get_stream("s/a"), store.get_stream("s/b")
        assert a is not None and b is not None
        assert len(a.incarnation) == 32 and len(b.incarnation) == 32 and a.incarnation != b.incarnation
        journal = {entry.source: entry.incarnation for entry in store.get_journal("s/a")}
        assert journal == {"before": "", "after": a.incarnation}
        assert [e.source for e in store.get_journal("s/a", a.incarnation)] == ["after"]
    finally:
        store.close()
