"""The truncation applier stops in one line when its topics are missing, after its broker check: a network
wait on a broker address that never answers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from reclaim.cli.main import build_parser, settings_from
from reclaim.exits import Unavailable
from reclaim.services import applier, preflight


@pytest.mark.parametrize(("flags", "missing"), [([], "missing topics p.truncation, p.stream-cuts on h:1"),
                                                (["--record-every-s", "0"], "missing topic p.truncation on h:1")])
def test_the_applier_without_its_topics_stops_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          flags: list[str], missing: str) -> None:
    # With another --topic-prefix than `topics create` was given, it polled a topic that is not there for ever.
    monkeypatch.setattr(preflight, "cluster_metadata", lambda address, timeout_s=0: SimpleNamespace(topics={}))
    monkeypatch.setenv("RECLAIM_RECORD_AUTH", "off")  # the applier refuses to start without a keyring otherwise

    @contextmanager
    def unreached(settings: object) -> Iterator[None]:
        raise AssertionError("nothing is opened before the topics are checked")
        yield

    monkeypatch.setattr(applier, "stream_controller", unreached)
    args = build_parser().parse_args(["truncation-applier", "--bootstrap", "h:1", "--topic-prefix", "p.",
                                      "--state-dir", str(tmp_path / "state"), *flags])
    with pytest.raises(Unavailable, match=missing):
        args.run(args, settings_from(args))
