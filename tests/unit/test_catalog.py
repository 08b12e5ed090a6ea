"""build_chain: turning config.xml's module lists into linked chains."""

import pytest

from tests.fakes import FakeRuntime
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import ConfigError, ModuleSpec, default_pipelines
from wiremq.modules.core import Core
from wiremq.modules.pipeline.admission import AdmissionModule
from wiremq.modules.pipeline.catalog import build_chain
from wiremq.modules.pipeline.chain import PipelineModule, Terminal
from wiremq.modules.pipeline.distributing import DistributingModule
from wiremq.modules.pipeline.prioqueue import PrioQueueModule
from wiremq.modules.pipeline.storage import StorageModule
from wiremq.modules.pipeline.transaction import TransactionModule


class RecordingModule(PipelineModule):
    """A plug-in module, loaded by class path from this test module."""

    def handle(self, batch):
        self.downstream.handle(batch)


class NotAModule:
    pass


@pytest.fixture
def core():
    return Core(Settings(REGISTRY), FakeRuntime(), None, default_pipelines())


@pytest.fixture
def context(core):
    return lambda: core.module_context("p2p")


def specs(*references: str) -> list[ModuleSpec]:
    """Specs on lines 10, 11, ... of config.xml; a reference with ':' is a class path."""
    return [
        ModuleSpec(ref, ":" in ref, f"config.xml:{line}")
        for line, ref in enumerate(references, start=10)
    ]


def test_default_chain_is_built_and_linked_in_order(context):
    chain = build_chain(
        "p2p",
        specs("admission", "transaction", "prioqueue", "storage", "distributing"),
        context,
    )
    kinds = [
        AdmissionModule,
        TransactionModule,
        PrioQueueModule,
        StorageModule,
        DistributingModule,
    ]
    assert [type(m) for m in chain.modules] == kinds
    assert chain.head is chain.modules[0]
    for module, following in zip(chain.modules, chain.modules[1:], strict=False):
        assert module.downstream is following
    assert isinstance(chain.modules[-1].downstream, Terminal)


def test_transaction_module_enables_transactions_for_its_domain():
    core = Core(Settings(REGISTRY), FakeRuntime(), None, default_pipelines())
    assert set(core.transactions.modules) == {"p2p", "pubsub"}
    lean = specs("admission", "storage", "distributing")
    other = Core(Settings(REGISTRY), FakeRuntime(), None, {"p2p": lean, "pubsub": lean})
    assert other.transactions.modules == {}


def test_plug_in_class_path_loads_a_pipeline_module(context):
    references = ("admission", "storage", f"{__name__}:RecordingModule", "distributing")
    chain = build_chain("p2p", specs(*references), context)
    assert [type(m) for m in chain.modules] == [
        AdmissionModule,
        StorageModule,
        RecordingModule,
        DistributingModule,
    ]


A = "admission"


@pytest.mark.parametrize(
    ("references", "where", "fragment"),
    [
        ((A, "storage", "stroage", "distributing"), 12, "unknown module 'stroage'; built-in"),
        ((A, "storage", f"{__name__}:NotAModule", "distributing"), 12, "not a PipelineModule"),
        ((A, "storage", "os.path:join", "distributing"), 12, "not a PipelineModule"),
        ((A, "storage", f"{__name__}:Missing", "distributing"), 12, "cannot load module class"),
        ((A, "storage", "no_such_package_xyz:Cls", "distributing"), 12, "cannot load module"),
        ((A, "prioqueue", "distributing"), 10, "needs the 'storage' module"),
        ((A, "storage"), 10, "needs the 'distributing' module"),
        (("storage", "distributing"), 10, "needs the 'admission' module"),
        (("storage", A, "distributing"), 10, "'admission' must come first"),
        ((A, "distributing", "storage"), 10, "'storage' must precede 'distributing'"),
        ((A, "storage", "transaction", "distributing"), 10, "'transaction' must precede"),
    ],
    ids=[
        "unknown-name",
        "not-a-module-class",
        "not-a-class",
        "missing-class",
        "missing-module",
        "no-storage",
        "no-distributing",
        "no-admission",
        "admission-not-first",
        "wrong-order",
        "transaction-after-storage",
    ],
)
def test_bad_module_list_is_refused(context, references, where, fragment):
    with pytest.raises(ConfigError) as caught:
        build_chain("p2p", specs(*references), context)
    message = str(caught.value)
    assert message.startswith(f"config.xml:{where}: ")
    assert fragment in message


def test_empty_module_list_names_the_pipeline(context):
    with pytest.raises(ConfigError, match="the pubsub pipeline needs the 'admission' module"):
        build_chain("pubsub", [], context)


def test_abstract_plug_in_class_is_refused_naming_the_line(context):
    references = (A, "storage", "wiremq.modules.pipeline:PipelineModule", "distributing")
    with pytest.raises(ConfigError, match="^config.xml:12: "):
        build_chain("p2p", specs(*references), context)


@pytest.mark.parametrize("twice", ["admission", "storage", "distributing", "transaction"])
def test_built_in_module_listed_twice_is_refused(context, twice):
    references = [A, "transaction", "storage", "distributing"]
    references.insert(references.index(twice) + 1, twice)
    with pytest.raises(ConfigError, match="^config.xml:"):
        build_chain("p2p", specs(*references), context)
