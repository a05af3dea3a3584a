"""The deployment files: the systemd units pass `systemd-analyze verify`, compose.yaml names
only environment variables Mnemo reads, and the image installs with `make install`."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.config import ENV_OVERRIDES, load_config
from core.turn.dispatcher import SHUTDOWN_GRACE_S
from tests.conftest import REPO

UNITS = ("mnemo.service", "mnemo-reflector.service")
INSTALLED_MNEMO = "/opt/mnemo/.venv/bin/mnemo"
STORAGE_URL_ENV = "MNEMO_STORAGE_URL"  # `[storage] url`


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(REPO / "deploy" / name, encoding="utf-8")
    return parser


@pytest.mark.parametrize("name", UNITS)
def test_systemd_unit_verifies(name: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    text = (REPO / "deploy" / name).read_text(encoding="utf-8")
    assert INSTALLED_MNEMO in text
    # verify checks that ExecStart's binary exists: point it at this venv's mnemo.
    here = Path(sys.executable).with_name("mnemo")
    (tmp_path / name).write_text(text.replace(INSTALLED_MNEMO, str(here)), encoding="utf-8")
    result = subprocess.run(
        [analyze, "verify", str(tmp_path / name)], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr.strip()) == (0, ""), result.stderr


@pytest.mark.parametrize(("name", "command"), list(zip(UNITS, ("run", "reflector"), strict=True)))
def test_systemd_unit_restarts_on_failure_and_waits_out_the_graceful_stop(
    name: str, command: str
) -> None:
    service = unit(name)["Service"]
    assert service["ExecStart"].split()[-1] == command
    assert service["Restart"] == "on-failure"
    assert SHUTDOWN_GRACE_S < int(service["TimeoutStopSec"]) <= 10  # the grace, then teardown
    assert service["User"] != "root"
    for hardening in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp"):
        assert service[hardening] in {"yes", "strict"}, hardening


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "compose.yaml").read_text(encoding="utf-8"))
    return loaded


def test_compose_runs_postgres_with_pgvector_the_bot_and_a_reflector_worker() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "bot", "reflector"}
    assert services["postgres"]["image"] == "pgvector/pgvector:pg17"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["bot"]["command"] == ["run"]
    assert services["reflector"]["command"] == ["reflector"]
    for name in ("bot", "reflector"):
        wait = services[name]["depends_on"]["postgres"]["condition"]
        assert wait == "service_healthy"
    assert "/healthz" in " ".join(services["bot"]["healthcheck"]["test"])


def test_compose_sets_only_environment_variables_mnemo_reads() -> None:
    services = compose()["services"]
    known = set(ENV_OVERRIDES)
    for name in ("bot", "reflector"):
        environment = services[name]["environment"]
        assert STORAGE_URL_ENV in environment, name
        assert set(environment) <= known, (name, set(environment) - known)
    assert {"TELEGRAM_BOT_TOKEN", "MNEMO_TELEGRAM_WEBHOOK_SECRET"} <= set(
        services["bot"]["environment"]
    )


def test_the_image_installs_with_make_install_and_runs_as_a_user() -> None:
    lines = [
        line.strip()
        for line in (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[0] == "FROM python:3.11-slim"
    assert any(line.startswith("RUN make install") for line in lines)
    # ... then the bytecode of Mnemo's modules, which the image's user could not write later
    [compiled] = [line.split() for line in lines if "compileall" in line]
    assert {"bots", "core", "memory", "reflector", "migrations"} <= set(compiled)
    assert "install:" in (REPO / "Makefile").read_text(encoding="utf-8")
    [user] = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert user not in {"root", "0"}
    assert 'VOLUME ["/data"]' in lines
    assert 'ENTRYPOINT ["/opt/mnemo/venv/bin/mnemo"]' in lines and 'CMD ["run"]' in lines


def test_the_image_config_parses_and_keeps_data_on_the_volume() -> None:
    config = load_config(REPO / "deploy" / "config.toml", env={})
    assert config.storage.data_dir == Path("/data")
    assert config.terminal.enabled is False
