"""The latest values of a bounded history: what a group's memory keeps of its joins,
rebalances, departures and commit gaps.

:class:`Latest` is the part of ``collections.deque(maxlen=...)`` the memory uses, in a
list: an empty one takes 64 bytes where a deque takes 760 (its first block of 64 slots,
allocated when it is made). Every group keeps five such histories and most groups never
rejoin, rebalance or lose a member, so at 2,000 groups the deques alone held 6 MB of
empty blocks. The histories are short (at most 1,000 values, dropped from the front as
they age out), so dropping the oldest from a list costs little.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


class Latest(list[T]):
    """At most ``maxlen`` values, oldest first; appending past it drops the oldest."""

    __slots__ = ("maxlen",)

    def __init__(self, values: Iterable[T] = (), *, maxlen: int) -> None:
        super().__init__(values)
        self.maxlen = maxlen
        self._trim()

    def append(self, value: T) -> None:
        super().append(value)
        if len(self) > self.maxlen:
            del self[0]

    def extend(self, values: Iterable[T]) -> None:
        super().extend(values)
        self._trim()

    def popleft(self) -> T:
        return self.pop(0)

    def _trim(self) -> None:
        excess = len(self) - self.maxlen
        if excess > 0:
            del self[:excess]

    def __reduce__(self) -> tuple[object, tuple[list[T], int]]:
        return _latest, (list(self), self.maxlen)


def _latest(values: list[T], maxlen: int) -> Latest[T]:
    """A :class:`Latest` read back by pickle or copy."""
    return Latest(values, maxlen=maxlen)
