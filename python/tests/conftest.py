"""Fixtures of the Python package's tests: real lakes made by the real
``sluice`` binary the wheel installed (found on PATH, as a user finds it)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest


def sluice_cli(*args: str, lake: "pathlib.Path | str | None" = None) -> str:
    """Run the installed ``sluice`` command; its standard output."""
    command = [shutil.which("sluice") or "sluice"]
    if lake is not None:
        command += ["--lake", str(lake)]
    done = subprocess.run(command + list(args), capture_output=True, text=True)
    assert done.returncode == 0, f"sluice {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def demo_lake(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The demo pipeline's lake: four lake versions (generate, square,
    stats, keep), the data table growing over the first two. Shared and
    only read."""
    folder = tmp_path_factory.mktemp("demo") / "demo"
    sluice_cli("demo", str(folder))
    return folder / "lake"


@pytest.fixture
def empty_lake(tmp_path: pathlib.Path) -> pathlib.Path:
    """A new lake of the test's own."""
    lake = tmp_path / "lake"
    sluice_cli("init", lake=lake)
    return lake
