"""docs/xa.md's small transaction coordinator, run as written against two real servers:
a transfer on both or on neither, a coordinator crash between the phases, a "no" vote."""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.integration.clients import connect, fill

DOC = Path(__file__).resolve().parents[2] / "docs" / "xa.md"


@pytest.fixture(scope="module")
def coordinator() -> SimpleNamespace:
    """The coordinator's code, taken from the first python block of docs/xa.md."""
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)[:1]
    namespace: dict[str, object] = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    return SimpleNamespace(**namespace)


def _two(start_server, tmp_path: Path, **second_settings: str):
    """Two servers, each with its own data folder."""
    second = {"Server.datadir": str(tmp_path / "second"), **second_settings}
    return start_server(), start_server(**second)


def _bodies(port: int, queue: str, count: int) -> list[str]:
    consumer, recorder = connect(port)
    consumer.subscribe(queue, id="check")
    recorder.wait_until(lambda: len(recorder.messages) >= count)
    time.sleep(0.3)  # a late one would show
    consumer.disconnect()
    return recorder.bodies()


def test_a_transfer_happens_on_both_servers(start_server, coordinator, tmp_path: Path):
    first, second = _two(start_server, tmp_path)
    fill(first.port, "/queue/orders", ["order 1"], persistent="true")
    source = coordinator.Resource("127.0.0.1", first.port)
    target = coordinator.Resource("127.0.0.1", second.port)
    assert coordinator.transfer(source, target, tmp_path / "decisions.json") is True
    assert _bodies(second.port, "/queue/shipped", 1) == ["order 1"]
    assert _bodies(first.port, "/queue/orders", 0) == []


def test_a_coordinator_crash_between_the_phases_is_finished_by_recovery(
    start_server, coordinator, tmp_path: Path
):
    first, second = _two(start_server, tmp_path)
    fill(first.port, "/queue/orders", ["order 2"], persistent="true")
    log = tmp_path / "decisions.json"
    source = coordinator.Resource("127.0.0.1", first.port)
    target = coordinator.Resource("127.0.0.1", second.port)
    assert coordinator.transfer(source, target, log, fail_before_commit=True) is None
    source.connection.disconnect()  # the coordinator is gone; its branches stay prepared
    target.connection.disconnect()
    assert _bodies(second.port, "/queue/shipped", 0) == []
    restarted = [coordinator.Resource("127.0.0.1", s.port) for s in (first, second)]
    assert [len(r.recover()) for r in restarted] == [1, 1]
    coordinator.recover(restarted, log)
    assert [r.recover() for r in restarted] == [[], []]
    assert _bodies(second.port, "/queue/shipped", 1) == ["order 2"]
    assert _bodies(first.port, "/queue/orders", 0) == []


def test_a_no_vote_rolls_the_transfer_back_everywhere(start_server, coordinator, tmp_path: Path):
    # The target holds so little for open transactions that the branch is discarded.
    first, second = _two(
        start_server,
        tmp_path,
        **{
            "TransactionMemSizeManager.uncommittedtxmemsizelimit": "1",
            "TransactionMemSizeManager.txmemsizereducestategy": "ALL",
        },
    )
    fill(first.port, "/queue/orders", ["order 3"], persistent="true")
    source = coordinator.Resource("127.0.0.1", first.port)
    target = coordinator.Resource("127.0.0.1", second.port)
    assert coordinator.transfer(source, target, tmp_path / "decisions.json") is False
    assert _bodies(second.port, "/queue/shipped", 0) == []
    assert _bodies(first.port, "/queue/orders", 1) == ["order 3"]
