"""The write-ahead log facade passes every capability suite on every backend."""

from __future__ import annotations

import pytest

from .facade_count_tests import FacadeCountTests
from .facade_durable_tests import FacadeDurableTests
from .facade_expiry_tests import FacadeExpiryTests
from .facade_queue_tests import FacadeQueueTests
from .facade_reopen_tests import FacadeReopenTests


class FacadeCapabilities(
    FacadeQueueTests, FacadeDurableTests, FacadeExpiryTests, FacadeReopenTests, FacadeCountTests
):
    pass


class TestFacadeOnFileStorage(FacadeCapabilities):
    @pytest.fixture
    def backend(self, file_backend: str) -> str:
        return file_backend


class TestFacadeOnZEO(FacadeCapabilities):
    @pytest.fixture
    def backend(self, zeo_backend: str) -> str:
        return zeo_backend


class TestFacadeOnPostgreSQL(FacadeCapabilities):
    @pytest.fixture
    def backend(self, postgresql_backend: str) -> str:
        return postgresql_backend
