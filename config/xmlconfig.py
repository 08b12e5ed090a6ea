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

import os
import re
import xml.parsers.expat
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import quoteattr

from wiremq.config.parameters import REGISTRY
from wiremq.config.registry import Parameter, Registry, Value
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
    command_line: frozenset[str] = frozenset()  # parameters the command line gave
    memory_levels: list[LevelSpec] = field(default_factory=default_memory_levels)


@dataclass
class _Element:
    tag: str
    attrs: dict[str, str]
    line: int
    offset: int  # of its start tag's "<", in bytes of the UTF-8 text
    children: list[_Element] = field(default_factory=list)


def _parse_xml(text: str | bytes, source: str) -> _Element:
    parser = xml.parsers.expat.ParserCreate()
    stack: list[_Element] = []
    roots: list[_Element] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        element = _Element(tag, attrs, parser.CurrentLineNumber, parser.CurrentByteIndex)
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
    The first problem found is raised as a ``ConfigError``.
    """
    return _Reader(registry, collect=False).read(path, overrides or {})


def check_config(path: str | Path, registry: Registry = REGISTRY) -> list[ConfigError]:
    """Every problem of a config.xml (``wiremq config check``), in the order found: a
    file that is not well-formed stops at its first, the rest go on past each problem."""
    reader = _Reader(registry, collect=True)
    try:
        reader.read(path, {})
    except ConfigError as error:  # the file itself cannot be read on
        reader.problems.append(error)
    return reader.problems


class _Reader:
    """Reads a config.xml into ``ServerConfig``; each problem is raised, or, when
    ``collect``, recorded in ``problems`` and the reading goes on."""

    def __init__(self, registry: Registry, collect: bool) -> None:
        self.registry = registry
        self.collect = collect
        self.problems: list[ConfigError] = []
        self.given: dict[str, str] = {}  # where each parameter was given

    def fail(self, error: ConfigError) -> None:
        if not self.collect:
            raise error
        self.problems.append(error)

    def read(self, path: str | Path | None, overrides: dict[str, str]) -> ServerConfig:
        registry = self.registry
        settings = Settings(registry)
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
                try:
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
                        self._read_group(element, where, settings)
                except ConfigError as error:
                    self.fail(error)
        for key, text in overrides.items():
            group, _, name = key.partition(".")
            param = registry.get(group, name)
            if param is None:
                self.fail(ConfigError("command line", "unknown parameter", key))
                continue
            try:
                settings.set(param.key, param.parse(text))
            except ValueError as error:
                self.fail(ConfigError("command line", str(error), param.key))
                continue
            self.given[param.key] = "command line"
        for problem in settings.relation_problems():
            key = problem.parameter.key
            self.fail(ConfigError(self.given[key], str(problem), key))
        given_here = frozenset(k for k, where in self.given.items() if where == "command line")
        return ServerConfig(
            settings,
            pipelines,
            str(path) if path is not None else None,
            given_here,
            memory_levels,
        )

    def _read_group(self, element: _Element, where: str, settings: Settings) -> None:
        registry = self.registry
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
                self.fail(
                    ConfigError(
                        where,
                        "unknown parameter; " + registry.suggest(group, name),
                        f"{group}.{name}",
                    )
                )
                continue
            try:
                value = param.parse(text)
                if destination is None:
                    settings.set(param.key, value)
                    self.given[param.key] = where
                else:
                    settings.set_for_destination(destination, param.name, value)
            except ValueError as error:
                self.fail(ConfigError(where, f"{error}", param.key))


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


# -- writing changed values back ------------------------------------------------------------

BACKUP_SUFFIX = ".bak"
_ATTRIBUTE = re.compile(rb"""\s+([^\s=/>]+)\s*=\s*("[^"]*"|'[^']*')""")
_EMPTY = f'<?xml version="1.0" encoding="utf-8"?>\n<{ROOT}>\n</{ROOT}>\n'


@dataclass(frozen=True, slots=True)
class _Tag:
    """A top-level element's start tag in the file: its group, destination and byte span,
    and each attribute's name with the span of its value (quotes included)."""

    group: str
    destination: str | None
    start: int
    end: int  # just past the tag's closing ``>`` (or ``/>``)
    attributes: tuple[tuple[str, int, int], ...]


def save_values(
    path: str | Path,
    values: dict[str, Value],
    destinations: dict[str, dict[str, Value | None]] | None = None,
    registry: Registry = REGISTRY,
) -> None:
    """Write values into config.xml, changing only what they name.

    Everything else in the file stays as it was: comments, layout, the order of
    elements and attributes. A parameter already given has its value replaced
    where it is given (the last element of its group that gives it, the one
    that wins); another is added to the last element of its group, or in a new
    element at the end. ``destinations`` sets (or, with None, removes) single
    destinations' ``<Destination name=...>`` overrides. The previous file is kept
    beside it (``config.xml.bak``); the new one replaces it at once, and only if
    it reads back without a problem.
    """
    target = Path(path)
    try:
        original = target.read_bytes()
    except FileNotFoundError:
        original = b""
    data = original or _EMPTY.encode()
    edits: list[tuple[int, int, bytes]] = []  # (start, end, replacement)
    added: dict[tuple[str, str | None], list[bytes]] = {}  # attributes of new elements
    tags = _top_level_tags(data, str(target), registry)
    changes: list[tuple[str, str | None, Parameter, Value | None]] = []
    for key, value in values.items():
        param = registry.get(*key.split(".", 1))
        if param is None:
            raise KeyError(f"unknown parameter {key}")
        changes.append((param.group, None, param, value))
    for destination, overrides in (destinations or {}).items():
        for name, value in overrides.items():
            param = registry.get(DESTINATION_GROUP, name)
            if param is None:
                raise KeyError(f"unknown parameter {DESTINATION_GROUP}.{name}")
            changes.append((DESTINATION_GROUP, destination, param, value))
    for group, where, param, value in changes:
        edit = _edit(data, tags, group, where, param, value)
        if edit is not None:
            edits.append(edit)
        elif value is not None:
            added.setdefault((group, where), []).append(
                f" {param.name}=".encode() + quoteattr(_text(value)).encode()
            )
    if added:
        edits.append(_new_elements(data, added))
    text = data
    for start, end, replacement in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:start] + replacement + text[end:]
    temporary = target.with_name(f".{target.name}.new")
    temporary.write_bytes(text)
    try:
        load_config(temporary, registry=registry)
    except ConfigError as error:
        temporary.unlink()
        raise ConfigError(
            str(target), f"the changed file would not load: {error.problem}"
        ) from None
    if original:
        target.with_name(target.name + BACKUP_SUFFIX).write_bytes(original)
    os.replace(temporary, target)


def _top_level_tags(data: bytes, source: str, registry: Registry) -> list[_Tag]:
    """The start tags of the root's children that name a parameter group (found by expat,
    so comments and CDATA never fool it), with their attributes' exact byte spans."""
    tags = []
    for element in _parse_xml(data, source).children:
        group = registry.group(element.tag)
        if group is not None:
            end, attributes = _scan_tag(data, element.offset)
            destination = element.attrs.get("name") if group == DESTINATION_GROUP else None
            tags.append(_Tag(group, destination, element.offset, end, attributes))
    return tags


def _scan_tag(data: bytes, begin: int) -> tuple[int, tuple[tuple[str, int, int], ...]]:
    """The end of the start tag at ``begin`` and its attributes' value spans."""
    name_end = begin + 1
    while name_end < len(data) and data[name_end : name_end + 1] not in b" \t\r\n/>":
        name_end += 1
    position = name_end
    attributes = []
    while True:
        found = _ATTRIBUTE.match(data, position)
        if found is None:
            break
        attributes.append((found.group(1).decode(), found.start(2), found.end(2)))
        position = found.end()
    close = data.index(b">", position)
    return close + 1, tuple(attributes)


def _edit(
    data: bytes,
    tags: list[_Tag],
    group: str,
    destination: str | None,
    param: Parameter,
    value: Value | None,
) -> tuple[int, int, bytes] | None:
    """The one edit that makes the file give ``value`` for ``param`` (None: not give it),
    or None if no element of its group (and destination) is there to hold it."""
    spellings = {param.name.lower(), *(a.lower() for a in param.aliases)}
    mine = [t for t in tags if t.group == group and t.destination == destination]
    quoted = quoteattr(_text(value)).encode() if value is not None else b""
    for tag in reversed(mine):
        for name, start, end in tag.attributes:
            if name.lower() in spellings:
                if value is None:  # the attribute goes, with the space before it
                    before = data.rindex(name.encode(), tag.start, start)
                    while data[before - 1 : before].isspace():
                        before -= 1
                    return before, end, b""
                return start, end, quoted
    if value is None or not mine:
        return None
    tag = mine[-1]
    close = tag.end - (2 if data[tag.end - 2 : tag.end] == b"/>" else 1)
    return close, close, f" {param.name}=".encode() + quoted


def _new_elements(
    data: bytes, added: dict[tuple[str, str | None], list[bytes]]
) -> tuple[int, int, bytes]:
    """New elements holding ``added``, on lines of their own before the root's end tag."""
    text = b""
    for (group, destination), attributes in added.items():
        named = f" name={quoteattr(destination)}" if destination is not None else ""
        text += f"  <{group}{named}".encode() + b"".join(attributes) + b"/>\n"
    root_end = data.rindex(f"</{ROOT}".encode())
    line_start = data.rfind(b"\n", 0, root_end) + 1
    if data[line_start:root_end].strip():  # the end tag shares its line: start a new one
        return root_end, root_end, b"\n" + text
    return line_start, line_start, text
