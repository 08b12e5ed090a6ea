"""Texts generated from the registry: the parameter reference and the effective configuration."""

from __future__ import annotations

from wiremq.config.registry import Parameter, Registry, Value
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import ModuleSpec

REFERENCE_HEADER = """\
# Parameters

Every parameter of the server, generated from the registry
(`config/parameters.py`) by `wiremq parameters`; `tests/unit/test_reference.py`
keeps this file current. Set them in config.xml (`<Group name="value"/>`), on
the command line (`wiremq serve --set Group.name=value`), or from the admin
console and `PUT /api/parameters/Group.name`. Those marked "yes" under "run
time" take effect at once when changed from the console or the API; the others
are saved to config.xml and take effect at the next start.

"""


def parameter_reference(registry: Registry) -> str:
    """The parameter reference as a Markdown table, by group."""
    rows = [
        "| parameter | default | allowed | unit | run time | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p in registry:
        live = "yes" if p.live else "no"
        rows.append(
            f"| {p.key} | {_cell(p.default)} | {p.allowed()} | {p.unit} | {live} | {p.doc} |"
        )
    return "\n".join(rows) + "\n"


def parameters_document(registry: Registry) -> str:
    """docs/parameters.md."""
    return REFERENCE_HEADER + parameter_reference(registry)


def _cell(value: Value) -> str:
    text = _shown(value)
    return text if text else '""'


def _shown(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def effective_configuration(
    settings: Settings, pipelines: dict[str, list[ModuleSpec]], source: str
) -> str:
    """``wiremq config show``: every value in force, its unit, and its default where it
    differs (marked ``*``), group by group; then the pipelines and single destinations."""
    lines = [f"# effective configuration ({source}); * differs from the default", ""]
    registry = settings.registry
    for group in registry.groups():
        lines.append(f"[{group}]")
        params = registry.in_group(group)
        width = max(len(p.name) for p in params)
        for p in params:
            lines.append(_line(p, settings.get(group, p.name), width))
        lines.append("")
    for domain, specs in pipelines.items():
        modules = " > ".join(spec.reference for spec in specs)
        lines.append(f"[Pipeline {domain}] {modules}")
    for destination, overrides in sorted(settings.destinations.items()):
        lines.append("")
        lines.append(f"[Destination {destination}]")
        for name, value in overrides.items():
            param = registry.get("Destination", name)
            assert param is not None
            lines.append(_line(param, value, len(name)))
    return "\n".join(lines) + "\n"


def _line(p: Parameter, value: Value, width: int) -> str:
    changed = value != p.default
    unit = f" {p.unit}" if p.unit else ""
    default = f"   (default {_cell(p.default)})" if changed else ""
    return f"{'*' if changed else ' '} {p.name:<{width}} = {_shown(value)}{unit}{default}"
