"""The server's resident-memory sampler when the process has no descriptor left."""

from __future__ import annotations

import os
import resource

from structlog.testing import capture_logs

from wiremq.server.app import ResidentMemory


def test_a_reading_without_descriptors_keeps_the_last_figure_with_one_warning():
    """Reading /proc/self/statm under EMFILE raised at every sample (a traceback each time):
    now the last figure holds and one warning says why, until a reading succeeds again."""
    memory = ResidentMemory()
    first = memory()
    assert first > 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
    try:
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        with capture_logs() as logs:
            readings = [memory() for _ in range(3)]
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert readings == [first] * 3
    assert [entry["event"] for entry in logs] == ["memory.unreadable"]
    assert "Too many open files" in logs[0]["error"]
    with capture_logs() as logs:
        assert memory() > 0
    assert [entry["event"] for entry in logs] == ["memory.readable"]
