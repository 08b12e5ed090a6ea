"""Every backend passes every capability suite, as ZODB's storages pass its mixins."""

from __future__ import annotations

import pytest

from .store_count_tests import CountTests
from .store_durable_tests import DurableSubscriptionTests
from .store_expiry_tests import ExpirySweepTests
from .store_queue_tests import EnqueueAckTests
from .store_reopen_tests import ReopenTests


class AllCapabilities(
    EnqueueAckTests, DurableSubscriptionTests, ExpirySweepTests, ReopenTests, CountTests
):
    pass


class TestFileStorage(AllCapabilities):
    @pytest.fixture
    def backend(self, file_backend: str) -> str:
        return file_backend


class TestZEO(AllCapabilities):
    @pytest.fixture
    def backend(self, zeo_backend: str) -> str:
        return zeo_backend


class TestPostgreSQL(AllCapabilities):
    @pytest.fixture
    def backend(self, postgresql_backend: str) -> str:
        return postgresql_backend
