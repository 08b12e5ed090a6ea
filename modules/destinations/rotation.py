"""A walk over every destination a slice at a time, for the periodic tasks.

A task that looked at every destination in one go held the event loop for
seconds with 100,000 of them (a sweep, the console's sample of rates), and
clients waited. A ``Rotation`` hands out the registry's entries at most
``DestinationManager.sweepslice`` at a time, where the last slice stopped; the
task runs again on the next turn of the event loop (``Periodic``) until the
pass has reached every destination, then waits its interval. A pass takes the
names the registry holds when it starts: one made meanwhile is reached by the
next pass, one removed meanwhile is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class Rotation(Generic[T]):
    """Passes over the values of ``registries`` (one after the other), a slice per call
    (see the module docstring)."""

    def __init__(self, *registries: Mapping[str, T]) -> None:
        self.registries = registries
        self._names: list[list[str]] = []  # the pass under way: each registry's names
        self._part = 0  # the registry it is in
        self._at = 0  # where in its names

    def next_slice(self, count: int) -> list[T]:
        """The entries of the next ``count`` names of the pass under way (a new pass if
        none is), those removed since it began left out."""
        if self.done:
            self._names = [list(registry) for registry in self.registries]
            self._part = self._at = 0
        found: list[T] = []
        left = count
        while left > 0 and self._part < len(self._names):
            names = self._names[self._part][self._at : self._at + left]
            registry = self.registries[self._part]
            found.extend(entry for name in names if (entry := registry.get(name)) is not None)
            left -= len(names)
            self._at += len(names)
            if self._at >= len(self._names[self._part]):
                self._part += 1
                self._at = 0
        return found

    @property
    def done(self) -> bool:
        """Whether the last pass has reached every name it began with (or none began)."""
        return self._part >= len(self._names)
