"""The values in force: registry defaults, overridden by config.xml and the command line."""

from __future__ import annotations

from collections.abc import Mapping

from wiremq.config.registry import Parameter, Registry, Value


class Settings:
    """Typed, validated parameter values, read as ``settings.get("Group", "name")``."""

    def __init__(self, registry: Registry, values: Mapping[str, Value] | None = None) -> None:
        self.registry = registry
        self._values: dict[str, Value] = {p.key: p.default for p in registry}
        for key, value in (values or {}).items():
            self.set(key, value)

    def _param(self, group: str, name: str) -> Parameter:
        param = self.registry.get(group, name)
        if param is None:
            raise KeyError(f"unknown parameter {group}.{name}")
        return param

    def get(self, group: str, name: str) -> Value:
        return self._values[self._param(group, name).key]

    def get_int(self, group: str, name: str) -> int:
        value = self.get(group, name)
        assert isinstance(value, int)
        return value

    def get_float(self, group: str, name: str) -> float:
        value = self.get(group, name)
        assert isinstance(value, int | float)
        return float(value)

    def get_str(self, group: str, name: str) -> str:
        return str(self.get(group, name))

    def set(self, key: str, value: Value) -> None:
        """Set ``Group.name``; the value must already be typed and is checked."""
        group, _, name = key.partition(".")
        param = self._param(group, name)
        param.check(value)
        self._values[param.key] = value

    def items(self) -> list[tuple[str, Value]]:
        return list(self._values.items())
