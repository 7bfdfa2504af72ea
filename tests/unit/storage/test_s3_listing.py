"""The pure half of ``present()`` on S3: StartAfter keys, grouping by parent and the listing budget."""

from __future__ import annotations

import bisect

import pytest

from reclaim.storage.s3_listing import MIN_BUDGET, group_by_parent, key_just_before, present_keys


class SortedListing:
    """A bucket's keys in S3's order, paged the way ListObjectsV2 pages them (a plain in-memory listing)."""

    def __init__(self, keys: list[str], page_size: int = 1000) -> None:
        self.keys = sorted(keys)
        self.page_size = page_size
        self.requests: list[tuple[str, str, str | None]] = []

    def __call__(self, prefix: str, start_after: str, token: str | None) -> tuple[list[str], str | None]:
        self.requests.append((prefix, start_after, token))
        after = token if token is not None else start_after
        matching = [k for k in self.keys[bisect.bisect_right(self.keys, after):] if k.startswith(prefix)]
        page = matching[:self.page_size]
        return page, page[-1] if len(matching) > self.page_size else None


@pytest.mark.parametrize(("key", "expected"), [
    ("seg/b", "seg/a\U0010ffff"),
    ("seg/c-10", "seg/c-1/\U0010ffff"),
    ("x", "w\U0010ffff"),
    ("seg/\ue000", "seg/\ud7ff\U0010ffff"),
    ("seg/a ", "seg/a"),
])
def test_key_just_before(key: str, expected: str) -> None:
    before = key_just_before(key)
    assert before == expected
    assert before.encode("utf-8") < key.encode("utf-8"), "S3 compares UTF-8 bytes"
    assert not any(ord(ch) < 0x20 for ch in before), "no control character goes to the server"


def test_group_by_parent() -> None:
    groups = group_by_parent(["b/x", "a/2", "top", "a/1", "a/sub/1", "a/1"])
    assert groups == {"": ["top"], "a/": ["a/1", "a/2"], "a/sub/": ["a/sub/1"], "b/": ["b/x"]}


def test_present_keys_lists_each_group_from_its_first_key() -> None:
    listing = SortedListing(["a/0", "a/1", "a/3", "a/sub/1", "b/1", "top"], page_size=2)
    assert present_keys(["a/1", "a/2", "a/3", "a/sub/1", "b/0", "top", "topless"], listing) == {
        "a/1", "a/3", "a/sub/1", "top"}
    first_requests = [r for r in listing.requests if r[2] is None]
    assert sorted(r[0] for r in first_requests) == ["", "a/", "a/sub/", "b/"]
    a_start = next(r[1] for r in first_requests if r[0] == "a/")
    assert "a/0" < a_start < "a/1", "the listing starts right before the group's first key"


def test_present_keys_follows_pages_until_past_the_last_key() -> None:
    keys = [f"p/k-{i:05d}" for i in range(2500)]
    listing = SortedListing(keys + ["p/zz"])
    wanted = keys[::2] + [f"p/k-{i:05d}x" for i in range(0, 2500, 7)]
    assert present_keys(wanted, listing) == set(keys[::2])
    assert len(listing.requests) == 3


def test_present_keys_stops_a_group_at_its_budget_and_reports_the_rest_present() -> None:
    keys = [f"p/k-{i:05d}" for i in range(3000)]
    listing = SortedListing(keys)
    found = present_keys(["p/k-00000", "p/k-00500x", "p/zz-missing"], listing)
    assert found == {"p/k-00000", "p/zz-missing"}, "unreached names count as present, reached ones are resolved"
    assert len(listing.requests) == 1 and MIN_BUDGET == 1000


@pytest.mark.parametrize(("group_size", "resolved"), [(2, False), (335, True)])
def test_present_keys_budget_grows_with_the_group(group_size: int, resolved: bool) -> None:
    keys = [f"p/k-{i:05d}" for i in range(1500)]
    listing = SortedListing(keys)
    wanted = [f"p/k-{i:05d}" for i in range(0, 3 * (group_size - 1), 3)] + ["p/zz-missing"]
    found = present_keys(wanted, listing)
    assert ("p/zz-missing" in found) is not resolved, "1000 keys read: over the budget of 2 names, not of 335"
    assert len(listing.requests) == (2 if resolved else 1)


def test_present_keys_an_endless_run_of_empty_pages_stops() -> None:
    calls = 0

    def empty_pages(prefix: str, start_after: str, token: str | None) -> tuple[list[str], str | None]:
        nonlocal calls
        calls += 1
        return [], "more"

    assert present_keys(["p/a"], empty_pages) == {"p/a"}
    assert calls == MIN_BUDGET
