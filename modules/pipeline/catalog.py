"""Building from config.xml: each pipeline's chain from its module list, and MemWatch's
levels with their actions; built-in names and plug-in classes alike."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import TypeVar

from wiremq.config.groups import MemWatchSettings
from wiremq.config.xmlconfig import ConfigError, LevelSpec, ModuleSpec
from wiremq.modules.memory.memwatch import BUILTIN_ACTIONS, ActionContext, MemoryAction, MemoryLevel
from wiremq.modules.pipeline.admission import AdmissionModule
from wiremq.modules.pipeline.chain import Chain, ModuleContext, PipelineModule
from wiremq.modules.pipeline.distributing import DistributingModule
from wiremq.modules.pipeline.prioqueue import PrioQueueModule
from wiremq.modules.pipeline.storage import StorageModule
from wiremq.modules.pipeline.transaction import TransactionModule
from wiremq.modules.runtime import Runtime

T = TypeVar("T")

BUILTIN: dict[str, type[PipelineModule]] = {
    cls.name: cls
    for cls in (
        AdmissionModule,
        TransactionModule,
        PrioQueueModule,
        StorageModule,
        DistributingModule,
    )
}


def resolve(spec: ModuleSpec) -> type[PipelineModule]:
    """The class a ``<module>`` entry names; a ConfigError names the entry's line."""
    if not spec.is_class_path:
        cls = BUILTIN.get(spec.reference)
        if cls is None:
            raise ConfigError(
                spec.where,
                f"unknown module {spec.reference!r}; built-in modules: {', '.join(BUILTIN)}",
            )
        return cls
    return load_class(spec.reference, spec.where, PipelineModule, "module")


def load_class(reference: str, where: str, base: type[T], kind: str) -> type[T]:
    """The class ``package.module:Class`` names, a concrete subclass of ``base`` (a
    ``kind`` of plug-in, for messages)."""
    module_name, _, class_name = reference.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(where, f"cannot load {kind} class {reference!r}: {error}") from None
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ConfigError(where, f"{reference!r} is not a {base.__name__} subclass")
    if inspect.isabstract(found):
        raise ConfigError(where, f"{reference!r} is abstract: it must implement every method")
    return found


def build_memory_levels(
    specs: list[LevelSpec], settings: MemWatchSettings, runtime: Runtime
) -> list[MemoryLevel]:
    """MemWatch's levels with their actions made; a ConfigError names the line of an
    unknown action or of options an action refuses."""
    levels = []
    for number, spec in enumerate(specs, 1):
        clear = spec.clear if spec.clear is not None else spec.start - settings.hysteresis
        actions = []
        for action in spec.actions:
            cls: type[MemoryAction] | None
            if action.is_class_path:
                cls = load_class(action.reference, action.where, MemoryAction, "memory action")
            else:
                cls = BUILTIN_ACTIONS.get(action.reference)
                if cls is None:
                    raise ConfigError(
                        action.where,
                        f"unknown memory action {action.reference!r}; built-in actions: "
                        + ", ".join(BUILTIN_ACTIONS),
                    )
            try:
                actions.append(cls(ActionContext(number, settings, runtime), dict(action.options)))
            except ValueError as error:
                raise ConfigError(action.where, f"action {action.reference!r}: {error}") from None
        levels.append(MemoryLevel(spec.start, max(0.0, clear), actions))
    return levels


def build_chain(
    domain: str, specs: list[ModuleSpec], context: Callable[[], ModuleContext]
) -> Chain:
    """Instantiate the listed modules in order (``check_chain`` says they may be)."""
    return Chain(domain, [cls(context()) for cls in check_chain(domain, specs)])


def check_chain(domain: str, specs: list[ModuleSpec]) -> list[type[PipelineModule]]:
    """The classes of the listed modules, checked against the order rules.

    Admission, storage and distributing are required: admission first (every
    module after it sees only admitted messages), storage before distributing.
    The transaction module, when present, comes before storage: what a
    transaction holds is stored at its COMMIT.
    """
    classes = [resolve(spec) for spec in specs]
    for spec, cls in zip(specs, classes, strict=True):
        if classes.count(cls) > 1:
            raise ConfigError(spec.where, f"module {spec.reference!r} is listed twice")
    where = specs[0].where if specs else f"the {domain} pipeline"
    for required in (AdmissionModule, StorageModule, DistributingModule):
        if required not in classes:
            raise ConfigError(where, f"the {domain} pipeline needs the '{required.name}' module")
    if classes.index(AdmissionModule) != 0:
        raise ConfigError(where, f"in the {domain} pipeline, 'admission' must come first")
    if classes.index(StorageModule) > classes.index(DistributingModule):
        raise ConfigError(where, f"in the {domain} pipeline, 'storage' must precede 'distributing'")
    if TransactionModule in classes and classes.index(TransactionModule) > classes.index(
        StorageModule
    ):
        raise ConfigError(where, f"in the {domain} pipeline, 'transaction' must precede 'storage'")
    return classes
