"""quick_init: the same construction as a frozen dataclass's own ``__init__``, and refusals of what it cannot copy."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from reclaim.quick_init import quick_init


@dataclass(frozen=True)
class Plain:
    name: str
    size: int = 3
    tags: tuple[str, ...] = ()
    derived: str = field(init=False, repr=False, compare=False)
    fixed: int = field(init=False, default=7)

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", f"{self.name}:{self.size}")


Quick = quick_init(dataclass(frozen=True)(type("Quick", (), {
    "__annotations__": dict(Plain.__annotations__), "size": 3, "tags": (),
    "derived": field(init=False, repr=False, compare=False), "fixed": field(init=False, default=7),
    "__post_init__": Plain.__post_init__})))


@pytest.mark.parametrize("args, kwargs", [(("a",), {}), (("a", 5), {}), (("a",), {"tags": ("x",)}),
                                          ((), {"name": "b", "size": 0, "tags": ()})])
def test_it_builds_what_the_generated_init_builds(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    slow, quick = Plain(*args, **kwargs), Quick(*args, **kwargs)
    assert vars(quick) == vars(slow)
    assert repr(quick).removeprefix("Quick") == repr(slow).removeprefix("Plain")
    assert quick == Quick(*args, **kwargs) and hash(quick) == hash(Quick(*args, **kwargs))


def test_it_keeps_the_class_frozen_and_its_signature_errors() -> None:
    quick = Quick("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.name = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Quick()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick("a", 1, (), 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick("a", derived="x")  # type: ignore[call-arg]


def test_the_hot_path_records_use_it() -> None:
    from reclaim.consumers.batches import Polled
    from reclaim.consumers.retry import Delivery
    from reclaim.deletion.facts import Pending
    from reclaim.storage.chunks import ChunkLocation, DeleteResult

    for cls in (Polled, Delivery, Pending, DeleteResult, ChunkLocation):
        assert cls.__init__.__code__.co_filename.startswith("<quick_init"), cls


@pytest.mark.parametrize("make", [
    lambda: dataclass(type("NotFrozen", (), {"__annotations__": {"a": int}})),
    lambda: dataclass(frozen=True, slots=True)(type("Slotted", (), {"__annotations__": {"a": int}})),
    lambda: dataclass(frozen=True)(type("Factory", (), {"__annotations__": {"a": list},
                                                         "a": field(default_factory=list)})),
    lambda: dataclass(frozen=True, kw_only=True)(type("KwOnly", (), {"__annotations__": {"a": int}})),
    lambda: dataclass(frozen=True)(type("WithInitVar", (), {
        "__annotations__": {"a": int, "b": dataclasses.InitVar[int]}, "__post_init__": lambda self, b: None})),
    lambda: type("NoDataclass", (), {}),
])
def test_it_refuses_what_it_cannot_copy_exactly(make: object) -> None:
    with pytest.raises(TypeError, match="quick_init"):
        quick_init(make())  # type: ignore[operator]
