"""A `data_dir` that cannot be created stops every command with one line, no traceback."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer
from tests.conftest import run_mnemo, write_config

COMMANDS = [
    ["chat"],
    ["run"],
    ["inspect", "terminal:local"],
    ["memory", "list", "--chat", "terminal:local"],
    ["reflect", "--once"],
    ["reflect", "--runs"],
    ["reflector"],
    ["strategies", "list"],
    ["chat", "export", "terminal:local"],
    ["chat", "delete", "terminal:local", "--yes"],
]


@pytest.mark.parametrize("where", ["under a file", "in /proc"])
def test_an_uncreatable_data_dir_is_one_line_for_every_command(
    tmp_path: Path, fake_llm: FakeOpenAIServer, where: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    data = blocker / "data" if where == "under a file" else Path("/proc/mnemo-test/data")
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, data)
    # Eleven processes that share nothing (no data dir can exist): started side by side,
    # as the suite mostly waits on process starts.
    with ThreadPoolExecutor(max_workers=4) as pool:
        checked = pool.submit(run_mnemo, ["doctor"], config)
        results = list(pool.map(lambda c: run_mnemo(c, config, stdin="hello\n"), COMMANDS))
        doctor = checked.result()
    for command, result in zip(COMMANDS, results, strict=True):
        assert result.returncode != 0, command
        [line] = result.stderr.splitlines() or [""]
        assert line.startswith(f"mnemo: cannot create data_dir {data}: "), (command, result.stderr)
        assert where != "under a file" or line.endswith(": Not a directory")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stdout + doctor.stderr
    assert f"[FAIL] database: cannot create data_dir {data}" in doctor.stdout
