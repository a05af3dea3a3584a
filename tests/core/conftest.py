"""The core's store tests on both engines: `core_storage_url` / `core_storage`.

Like `storage_url` / `storage` (tests/conftest.py), but the PostgreSQL database has only the
migrations that have a PostgreSQL version so far (`prepare_core_postgres`): the core's
stores are tested on PostgreSQL before the memory and reflector ones land. Once they have,
these are the same as `storage_url` / `storage` and the tests can switch to those.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import StorageConfig
from core.storage import Storage, open_storage
from tests.core.support import prepare_core_postgres


@pytest.fixture(params=["sqlite", "postgresql"])
def core_storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'mnemo.db'}"
    return prepare_core_postgres(str(request.getfixturevalue("fresh_postgres_url")))


@pytest.fixture
def core_storage(core_storage_url: str) -> Iterator[Storage]:
    opened = open_storage(StorageConfig(url=core_storage_url))
    yield opened
    opened.close()
