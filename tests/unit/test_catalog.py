"""build_chain: turning config.xml's module lists into linked chains."""

import pytest

from tests.fakes import FakeRuntime
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import ConfigError, ModuleSpec
from wiremq.modules.broker import Broker
from wiremq.modules.catalog import build_chain
from wiremq.modules.distributing import DistributingModule
from wiremq.modules.pipeline import ModuleContext, PipelineModule, Terminal
from wiremq.modules.prioqueue import PrioQueueModule
from wiremq.modules.storage import StorageModule
from wiremq.modules.transaction import TransactionModule


class RecordingModule(PipelineModule):
    """A plug-in module, loaded by class path from this test module."""

    def handle(self, message):
        self.downstream.handle(message)


class NotAModule:
    pass


@pytest.fixture
def context():
    settings = Settings(REGISTRY)
    context = ModuleContext(Broker(settings, FakeRuntime()), settings, "p2p")
    return lambda: context


def specs(*references: str) -> list[ModuleSpec]:
    """Specs on lines 10, 11, ... of config.xml; a reference with ':' is a class path."""
    return [
        ModuleSpec(ref, ":" in ref, f"config.xml:{line}")
        for line, ref in enumerate(references, start=10)
    ]


def test_default_chain_is_built_and_linked_in_order(context):
    chain = build_chain(
        "p2p", specs("transaction", "prioqueue", "storage", "distributing"), context
    )
    kinds = [TransactionModule, PrioQueueModule, StorageModule, DistributingModule]
    assert [type(m) for m in chain.modules] == kinds
    assert chain.head is chain.modules[0]
    for module, following in zip(chain.modules, chain.modules[1:], strict=False):
        assert module.downstream is following
    assert isinstance(chain.modules[-1].downstream, Terminal)
    assert chain.module(StorageModule) is chain.modules[2]


def test_transaction_module_enables_transactions_for_its_domain(context):
    build_chain("p2p", specs("transaction", "storage", "distributing"), context)
    assert context().broker.transactions.domains == {"p2p"}


def test_plug_in_class_path_loads_a_pipeline_module(context):
    chain = build_chain(
        "p2p", specs("storage", f"{__name__}:RecordingModule", "distributing"), context
    )
    assert [type(m) for m in chain.modules] == [
        StorageModule,
        RecordingModule,
        DistributingModule,
    ]


@pytest.mark.parametrize(
    ("references", "where", "fragment"),
    [
        (("storage", "stroage", "distributing"), 11, "unknown module 'stroage'; built-in modules"),
        (("storage", f"{__name__}:NotAModule", "distributing"), 11, "not a PipelineModule"),
        (("storage", "os.path:join", "distributing"), 11, "not a PipelineModule"),
        (("storage", f"{__name__}:Missing", "distributing"), 11, "cannot load module class"),
        (("storage", "no_such_package_xyz:Cls", "distributing"), 11, "cannot load module class"),
        (("prioqueue", "distributing"), 10, "needs the 'storage' module"),
        (("storage",), 10, "needs the 'distributing' module"),
        (("distributing", "storage"), 10, "'storage' must precede 'distributing'"),
        (("storage", "transaction", "distributing"), 10, "'transaction' must come first"),
    ],
    ids=[
        "unknown-name",
        "not-a-module-class",
        "not-a-class",
        "missing-class",
        "missing-module",
        "no-storage",
        "no-distributing",
        "wrong-order",
        "transaction-not-first",
    ],
)
def test_bad_module_list_is_refused(context, references, where, fragment):
    with pytest.raises(ConfigError) as caught:
        build_chain("p2p", specs(*references), context)
    message = str(caught.value)
    assert message.startswith(f"config.xml:{where}: ")
    assert fragment in message


def test_empty_module_list_names_the_pipeline(context):
    with pytest.raises(ConfigError, match="the pubsub pipeline needs the 'storage' module"):
        build_chain("pubsub", [], context)


def test_abstract_plug_in_class_is_refused_naming_the_line(context):
    references = ("storage", "wiremq.modules.pipeline:PipelineModule", "distributing")
    with pytest.raises(ConfigError, match="^config.xml:11: "):
        build_chain("p2p", specs(*references), context)


@pytest.mark.parametrize("twice", ["storage", "distributing", "transaction"])
def test_built_in_module_listed_twice_is_refused(context, twice):
    references = ["transaction", "storage", "distributing"]
    references.insert(references.index(twice) + 1, twice)
    with pytest.raises(ConfigError, match="^config.xml:"):
        build_chain("p2p", specs(*references), context)
