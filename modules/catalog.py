"""Building a chain from config.xml's module list: built-in names and plug-in classes."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

from wiremq.config.xmlconfig import ConfigError, ModuleSpec
from wiremq.modules.admission import AdmissionModule
from wiremq.modules.distributing import DistributingModule
from wiremq.modules.pipeline import Chain, ModuleContext, PipelineModule
from wiremq.modules.prioqueue import PrioQueueModule
from wiremq.modules.storage import StorageModule
from wiremq.modules.transaction import TransactionModule

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
    module_name, _, class_name = spec.reference.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(
            spec.where, f"cannot load module class {spec.reference!r}: {error}"
        ) from None
    if not (isinstance(found, type) and issubclass(found, PipelineModule)):
        raise ConfigError(spec.where, f"{spec.reference!r} is not a PipelineModule subclass")
    if inspect.isabstract(found):
        raise ConfigError(spec.where, f"{spec.reference!r} is abstract: it must implement handle")
    return found


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
