"""Reading config.xml through the parameter registry, and writing the default one.

The file's shape: one element per parameter group, each parameter an attribute
(``<VolQueueStoreImpl globalbytehighwatermark="16000000"/>``), one
``<Pipeline domain="p2p|pubsub">`` element per chain listing its modules in
order (``<module name="storage"/>`` for a built-in one,
``<module class="package.module:Class"/>`` for your own), and one
``<MemoryLevels>`` element listing MemWatch's levels, each with its actions
(``<level from="0.8"><action name="warn"/></level>``, the manual's levels by
default). Anything unknown or out of range is refused with the file, line,
parameter and what is allowed.
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


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One ``<action>`` of a memory level: a built-in name or a class path, and the other
    attributes as the action's options."""

    reference: str
    is_class_path: bool
    options: tuple[tuple[str, str], ...]
    where: str


@dataclass(frozen=True, slots=True)
class LevelSpec:
    """One ``<level>``: from ``start`` (a fraction of MemWatch.maxmemory), left below
    ``clear`` (None: ``hysteresis`` below its start), and its actions."""

    start: float
    clear: float | None
    actions: tuple[ActionSpec, ...]
    where: str


# The manual's MemWatch levels: level 1 from 50 % with an extra collection every 2 s,
# level 2 from 80 % with one every 750 ms and a warning (and a note back at level 0).
DEFAULT_MEMORY_LEVELS = (
    (0.5, (("collect", (("interval", "2.0"),)),)),
    (0.8, (("collect", (("interval", "0.75"),)), ("warn", ()))),
)


def default_memory_levels(source: str = "defaults") -> list[LevelSpec]:
    return [
        LevelSpec(
            start,
            None,
            tuple(ActionSpec(name, False, options, source) for name, options in actions),
            source,
        )
        for start, actions in DEFAULT_MEMORY_LEVELS
    ]


@dataclass
class ServerConfig:
    """What config.xml (or the defaults) says."""

    settings: Settings
    pipelines: dict[str, list[ModuleSpec]] = field(default_factory=dict)
    path: str | None = None
    memory_levels: list[LevelSpec] = field(default_factory=default_memory_levels)


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
    memory_levels = default_memory_levels()
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
        seen_levels = False
        for element in root.children:
            where = f"{source}:{element.line}"
            if element.tag == "MemoryLevels":
                if seen_levels:
                    raise ConfigError(where, "<MemoryLevels> is listed twice")
                seen_levels = True
                memory_levels = _read_levels(element, source)
            elif element.tag == "Pipeline":
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
    return ServerConfig(settings, pipelines, str(path) if path is not None else None, memory_levels)


def _read_group(
    element: _Element, where: str, settings: Settings, registry: Registry, given: dict[str, str]
) -> None:
    group = registry.group(element.tag)
    if group is None:
        raise ConfigError(
            where,
            f"unknown parameter group <{element.tag}>; known groups: "
            + ", ".join(sorted(registry.groups()) + ["MemoryLevels", "Pipeline"]),
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


def _read_levels(element: _Element, source: str) -> list[LevelSpec]:
    """MemWatch's levels, from level 1 up: each starts above the one before."""
    levels: list[LevelSpec] = []
    for child in element.children:
        where = f"{source}:{child.line}"
        if child.tag != "level":
            raise ConfigError(where, f"<MemoryLevels> holds <level> elements, not <{child.tag}>")
        start = _fraction(child.attrs, "from", where)
        if start is None:
            raise ConfigError(where, "a <level> needs from= (a fraction of MemWatch.maxmemory)")
        clear = _fraction(child.attrs, "clear", where)
        if clear is not None and clear > start:
            raise ConfigError(where, f"clear={clear:g} is above from={start:g}")
        if levels and start <= levels[-1].start:
            raise ConfigError(
                where, f"from={start:g} must be above the level before it ({levels[-1].start:g})"
            )
        unknown = set(child.attrs) - {"from", "clear"}
        if unknown:
            raise ConfigError(where, f"a <level> takes from= and clear=, not {sorted(unknown)}")
        actions = []
        for item in child.children:
            item_where = f"{source}:{item.line}"
            if item.tag != "action":
                raise ConfigError(
                    item_where, f"a <level> holds <action> elements, not <{item.tag}>"
                )
            options = dict(item.attrs)
            name, cls = options.pop("name", None), options.pop("class", None)
            if bool(name) == bool(cls):
                raise ConfigError(item_where, "an <action> needs exactly one of name= or class=")
            actions.append(
                ActionSpec(name or cls or "", bool(cls), tuple(options.items()), item_where)
            )
        levels.append(LevelSpec(start, clear, tuple(actions), where))
    return levels


def _fraction(attrs: dict[str, str], name: str, where: str) -> float | None:
    text = attrs.get(name)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(where, f"{name}={text!r} is not a number") from None
    if not 0 <= value <= 100:
        raise ConfigError(where, f"{name}={text!r}: a fraction of MemWatch.maxmemory, 0 to 100")
    return value


def render_config(
    settings: Settings,
    pipelines: dict[str, list[ModuleSpec]] | None = None,
    memory_levels: list[LevelSpec] | None = None,
) -> str:
    """config.xml text for these settings, every parameter documented in a comment."""
    pipelines = pipelines or default_pipelines()
    lines = ['<?xml version="1.0" encoding="utf-8"?>', f"<{ROOT}>"]
    for domain in DOMAINS:
        lines.append(f'  <Pipeline domain="{domain}">')
        for spec in pipelines[domain]:
            attr = "class" if spec.is_class_path else "name"
            lines.append(f"    <module {attr}={quoteattr(spec.reference)}/>")
        lines.append("  </Pipeline>")
    lines.append(
        "  <!-- MemWatch's levels, as fractions of MemWatch.maxmemory, with their actions -->"
    )
    lines.append("  <MemoryLevels>")
    for level in memory_levels if memory_levels is not None else default_memory_levels():
        clear = "" if level.clear is None else f" clear={quoteattr(f'{level.clear:g}')}"
        lines.append(f"    <level from={quoteattr(f'{level.start:g}')}{clear}>")
        for action in level.actions:
            attr = "class" if action.is_class_path else "name"
            options = "".join(f" {k}={quoteattr(v)}" for k, v in action.options)
            lines.append(f"      <action {attr}={quoteattr(action.reference)}{options}/>")
        lines.append("    </level>")
    lines.append("  </MemoryLevels>")
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
