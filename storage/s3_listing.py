"""Which of many S3 keys exist, found by listing their parent prefixes rather than one HEAD per key.

S3 lists keys in UTF-8 byte order, which is code-point order: Python's own string order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: One ListObjectsV2 page: ``(prefix, start_after, continuation)`` -> ``(keys, next continuation or None)``.
ListPage = Callable[[str, str, str | None], tuple[list[str], str | None]]

#: A group stops listing once it has read max(MIN_BUDGET, BUDGET_PER_KEY x group size) keys.
MIN_BUDGET = 1000
BUDGET_PER_KEY = 4

_MAX_CHAR = "\U0010ffff"
_SURROGATES = range(0xD800, 0xE000)


def key_just_before(key: str) -> str:
    """A StartAfter that lists ``key`` first: it sorts before ``key`` and no plausible key lies between.

    The last character is lowered by one and followed by U+10FFFF; a last character of space or less
    (never in a chunk name) is dropped instead, so the result never holds a control character.
    """
    last = ord(key[-1])
    if last <= 0x20:
        return key[:-1]
    lower = last - 1 if last - 1 not in _SURROGATES else _SURROGATES.start - 1
    return key[:-1] + chr(lower) + _MAX_CHAR


def group_by_parent(keys: Iterable[str]) -> dict[str, list[str]]:
    """Distinct ``keys``, sorted, grouped by parent prefix: the key up to and including its last '/'."""
    groups: dict[str, list[str]] = {}
    for key in sorted(set(keys)):
        groups.setdefault(key[:key.rfind("/") + 1], []).append(key)
    return groups


def present_keys(keys: Iterable[str], list_page: ListPage) -> set[str]:
    """The ``keys`` that exist now, listing each parent prefix from just before its first key past its last.

    A group that reads its budget of keys before passing its last key stops there and reports the keys
    it has not reached as present (``exists_many`` then asks a HEAD of each).
    """
    found: set[str] = set()
    for parent, group in group_by_parent(keys).items():
        found |= _present_in_group(parent, group, list_page)
    return found


def _present_in_group(parent: str, group: list[str], list_page: ListPage) -> set[str]:
    wanted = set(group)
    budget = max(MIN_BUDGET, BUDGET_PER_KEY * len(group))
    found: set[str] = set()
    reached = key_just_before(group[0])
    read = 0
    token: str | None = None
    while True:
        listed, token = list_page(parent, reached, token)
        read += max(1, len(listed))  # an empty page still counts, so a run of them cannot loop forever
        found.update(key for key in listed if key in wanted)
        reached = max(reached, listed[-1]) if listed else reached
        if token is None or reached >= group[-1]:
            return found
        if read >= budget:
            return found | {key for key in group if key > reached}
