"""`tests/collection_share.py`: each worker imports every test module, from its own share on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.collection_share import modules_to_collect, rotated


def test_each_worker_imports_every_module_once_from_a_start_of_its_own() -> None:
    modules = [Path(f"tests/test_{index:02}.py") for index in range(10)]
    orders = [rotated(modules, worker, 4) for worker in range(4)]
    assert all(sorted(order) == modules for order in orders)  # every module, once each
    assert [order[0].name for order in orders] == [
        "test_00.py", "test_02.py", "test_05.py", "test_07.py"
    ]  # fmt: skip
    assert rotated(modules, 0, 1) == modules


def test_the_list_is_what_collection_walks(pytestconfig: pytest.Config) -> None:
    found = modules_to_collect(pytestconfig)
    assert Path(__file__).resolve() in [path.resolve() for path in found]
    assert found == sorted(found)
    assert all(path.name.startswith("test_") and path.suffix == ".py" for path in found)
    assert not [path for path in found if "__pycache__" in path.parts]
