"""Reading config.xml through the parameter registry, and writing the default one.

The file's shape: one element per parameter group, each parameter an attribute
(``<VolQueueStoreImpl globalbytehighwatermark="16000000"/>``), and one
``<Pipeline domain="p2p|pubsub">`` element per chain listing its modules in
order (``<module name="storage"/>`` for a built-in one,
``<module class="package.module:Class"/>`` for your own). Anything unknown or
out of range is refused with the file, line, parameter and what is allowed.
"""

from __future__ import annotations

import xml.parsers.expat
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import quoteattr

from wiremq.config.parameters import REGISTRY
from wiremq.config.registry import Registry, RelationError, Value
from wiremq.config.settings import DESTINATION_GROUP, Settings

ROOT = "wiremq"
DOMAINS = ("p2p", "pubsub")
DEFAULT_PIPELINE = ("admission", "transaction", "prioqueue", "storage", "distributing")


class ConfigError(Exception):
    """A configuration problem, worded for the operator."""

    def __init__(self, where: str, problem: str, parameter: str | None = None) -> None:
        text = f"{where}: {parameter}: {problem}" if parameter else f"{where}: {problem}"
        super().__init__(text)
        self.where = where
        self.parameter = parameter
        self.problem = problem


@dataclass(frozen=True, slots=True)
class ModuleSpec:
    """One ``<module>`` entry: a built-in name or a ``package.module:Class`` path."""

    reference: str
    is_class_path: bool
    where: str


@dataclass
class ServerConfig:
    """What config.xml (or the defaults) says."""

    settings: Settings
    pipelines: dict[str, list[ModuleSpec]] = field(default_factory=dict)
    path: str | None = None


@dataclass
class _Element:
    tag: str
    attrs: dict[str, str]
    line: int
    children: list[_Element] = field(default_factory=list)


def _parse_xml(text: str, source: str) -> _Element:
    parser = xml.parsers.expat.ParserCreate()
    stack: list[_Element] = []
    roots: list[_Element] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        element = _Element(tag, attrs, parser.CurrentLineNumber)
        (stack[-1].children if stack else roots).append(element)
        stack.append(element)

    def end(tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as error:
        reason = xml.parsers.expat.errors.messages[error.code]
        raise ConfigError(f"{source}:{error.lineno}", f"not well-formed XML ({reason})") from None
    return roots[0]


def default_pipelines(source: str = "defaults") -> dict[str, list[ModuleSpec]]:
    return {d: [ModuleSpec(name, False, source) for name in DEFAULT_PIPELINE] for d in DOMAINS}


def load_config(
    path: str | Path | None,
    overrides: dict[str, str] | None = None,
    registry: Registry = REGISTRY,
) -> ServerConfig:
    """Read config.xml (or only defaults when ``path`` is None), then apply overrides.

    ``overrides`` maps ``Group.name`` to text, as given on the command line.
    """
    settings = Settings(registry)
    given: dict[str, str] = {}  # where each parameter was given
    pipelines = default_pipelines()
    source = str(path) if path is not None else "defaults"
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(source, f"cannot read the file ({error.strerror})") from None
        root = _parse_xml(text, source)
        if root.tag != ROOT:
            raise ConfigError(f"{source}:{root.line}", f"the root element must be <{ROOT}>")
        seen_pipelines: set[str] = set()
        for element in root.children:
            where = f"{source}:{element.line}"
            if element.tag == "Pipeline":
                domain, modules = _read_pipeline(element, where, source)
                if domain in seen_pipelines:
                    raise ConfigError(where, f"the {domain} pipeline is listed twice")
                seen_pipelines.add(domain)
                pipelines[domain] = modules
            else:
                _read_group(element, where, settings, registry, given)
    for key, text in (overrides or {}).items():
        group, _, name = key.partition(".")
        param = registry.get(group, name)
        if param is None:
            raise ConfigError("command line", "unknown parameter", key)
        try:
            settings.set(param.key, param.parse(text))
        except ValueError as error:
            raise ConfigError("command line", str(error), param.key) from None
        given[param.key] = "command line"
    try:
        settings.check_relations()
    except RelationError as error:
        raise ConfigError(given[error.parameter.key], str(error), error.parameter.key) from None
    return ServerConfig(settings, pipelines, str(path) if path is not None else None)


def _read_group(
    element: _Element, where: str, settings: Settings, registry: Registry, given: dict[str, str]
) -> None:
    group = registry.group(element.tag)
    if group is None:
        raise ConfigError(
            where,
            f"unknown parameter group <{element.tag}>; known groups: "
            + ", ".join(sorted(registry.groups()) + ["Pipeline"]),
        )
    if element.children:
        raise ConfigError(where, f"<{group}> takes its parameters as attributes, not elements")
    attrs = dict(element.attrs)
    destination = attrs.pop("name", None) if group == DESTINATION_GROUP else None
    if destination is not None and not destination.startswith(("/queue/", "/topic/")):
        raise ConfigError(
            where, f"<Destination name={destination!r}>: not /queue/NAME or /topic/NAME"
        )
    for name, text in attrs.items():
        param = registry.get(group, name)
        if param is None:
            raise ConfigError(
                where, "unknown parameter; " + registry.suggest(group, name), f"{group}.{name}"
            )
        try:
            value = param.parse(text)
            if destination is None:
                settings.set(param.key, value)
                given[param.key] = where
            else:
                settings.set_for_destination(destination, param.name, value)
        except ValueError as error:
            raise ConfigError(where, str(error), param.key) from None


def _read_pipeline(element: _Element, where: str, source: str) -> tuple[str, list[ModuleSpec]]:
    domain = element.attrs.get("domain", "")
    if domain not in DOMAINS:
        raise ConfigError(where, f"<Pipeline domain={domain!r}>: domain must be p2p or pubsub")
    modules = []
    for child in element.children:
        child_where = f"{source}:{child.line}"
        if child.tag != "module":
            raise ConfigError(child_where, f"<Pipeline> holds <module> elements, not <{child.tag}>")
        name, cls = child.attrs.get("name"), child.attrs.get("class")
        if bool(name) == bool(cls):
            raise ConfigError(child_where, "a <module> needs exactly one of name= or class=")
        modules.append(ModuleSpec(name or cls or "", bool(cls), child_where))
    return domain, modules


def render_config(settings: Settings, pipelines: dict[str, list[ModuleSpec]] | None = None) -> str:
    """config.xml text for these settings, every parameter documented in a comment."""
    pipelines = pipelines or default_pipelines()
    lines = ['<?xml version="1.0" encoding="utf-8"?>', f"<{ROOT}>"]
    for domain in DOMAINS:
        lines.append(f'  <Pipeline domain="{domain}">')
        for spec in pipelines[domain]:
            attr = "class" if spec.is_class_path else "name"
            lines.append(f"    <module {attr}={quoteattr(spec.reference)}/>")
        lines.append("  </Pipeline>")
    registry = settings.registry
    for group in registry.groups():
        lines.append("")
        params = registry.in_group(group)
        for p in params:
            unit = f" [{p.unit}]" if p.unit else ""
            live = "; changeable at run time" if p.live else ""
            lines.append(f"  <!-- {p.name}: {p.doc}{unit}; {p.allowed()}{live} -->")
        attrs = "\n    ".join(
            f"{p.name}={quoteattr(_text(settings.get(group, p.name)))}" for p in params
        )
        lines.append(f"  <{group}\n    {attrs}/>")
    for destination, overrides in settings.destinations.items():
        attrs = " ".join(f"{k}={quoteattr(_text(v))}" for k, v in overrides.items())
        lines.append(f"  <{DESTINATION_GROUP} name={quoteattr(destination)} {attrs}/>")
    lines.append(f"</{ROOT}>")
    return "\n".join(lines) + "\n"


def _text(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
