"""Artifact types declared from dataclasses and pydantic models: the
``[[artifact_type]]`` entry they become, put and get of their instances,
the same rows for the CLI, and the changes a lake refuses."""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
from typing import Dict, List, Optional, Union

import pytest

import sluice
from conftest import sluice_cli


@dataclasses.dataclass
class SpectrumPeak:
    sample: str
    mz: float
    intensity: int
    centroided: bool
    seen: datetime.datetime
    note: Optional[str] = None
    extra: Optional[Dict[str, int]] = None


def test_a_dataclass_becomes_a_declared_type_its_instances_are_put_and_got(empty_lake: pathlib.Path) -> None:
    before = "# my settings\n[maintenance]\nsmall_files = 16\n"
    (empty_lake / "sluice.toml").write_text(before)
    lake = sluice.Lake(empty_lake)
    assert lake.declare(SpectrumPeak, identity=["sample", "mz"]) == "added"
    assert lake.declare(SpectrumPeak, identity=["sample", "mz"]) == "unchanged"
    toml = (empty_lake / "sluice.toml").read_text()
    assert toml.startswith(before), toml
    assert 'key = "spectrum_peak"' in toml and 'table = "artifacts/spectrum_peaks"' in toml
    assert '{ name = "seen", type = "timestamp" }' in toml
    assert '{ name = "note", type = "string", nullable = true }' in toml
    assert '{ name = "extra", type = "json", nullable = true }' in toml

    seen = datetime.datetime(2026, 12, 7, 8, 30, tzinfo=datetime.timezone.utc)
    peak = SpectrumPeak("s1", 301.5, 12000, True, seen, extra={"charge": 2})
    first = lake.put("spectrum_peak", peak, step=2)
    # The identity is sample and mz: the same peak seen again is the same artifact.
    again = lake.put("spectrum_peak", dataclasses.replace(peak, intensity=1), step=2)
    assert again == first
    got = lake.get(first)
    assert got["sample"] == "s1" and got["mz"] == 301.5 and got["centroided"] is True
    assert got["note"] is None and got["extra"] == {"charge": 2}
    assert got["seen"] == seen

    # A fresh handle and the CLI see the type and its row.
    rows = sluice.Lake(empty_lake).sql("SELECT sample, intensity FROM spectrum_peaks")
    assert rows.to_pylist() == [{"sample": "s1", "intensity": 12000}]
    cli = sluice_cli("sql", "--format", "ndjson", "SELECT count(*) AS n FROM spectrum_peaks", lake=empty_lake)
    assert json.loads(cli) == {"n": 1}


def test_a_class_that_gains_an_optional_field_gives_the_table_that_column(empty_lake: pathlib.Path) -> None:
    @dataclasses.dataclass
    class Run:
        name: str

    lake = sluice.Lake(empty_lake)
    lake.declare(Run)
    lake.put("run", Run("a"))

    @dataclasses.dataclass
    class Run:  # noqa: F811 - the same type, a field later
        name: str
        loss: Optional[float] = None

    assert lake.declare(Run) == "replaced"
    lake.put("run", Run("b", 0.5))
    rows = lake.sql("SELECT name, loss FROM runs ORDER BY name").to_pylist()
    assert rows == [{"name": "a", "loss": None}, {"name": "b", "loss": 0.5}]


def test_a_change_the_lake_cannot_take_raises_and_leaves_the_file(empty_lake: pathlib.Path) -> None:
    @dataclasses.dataclass
    class Reading:
        value: float

    lake = sluice.Lake(empty_lake)
    lake.declare(Reading)
    lake.put("reading", Reading(1.5))
    before = (empty_lake / "sluice.toml").read_text()

    @dataclasses.dataclass
    class Reading:  # noqa: F811 - the column's type changed under a row
        value: str

    with pytest.raises(sluice.SluiceError, match="value"):
        lake.declare(Reading)
    assert (empty_lake / "sluice.toml").read_text() == before
    assert lake.put("reading", {"value": 2.5})


def test_fields_without_a_column_type_are_named(empty_lake: pathlib.Path) -> None:
    @dataclasses.dataclass
    class Bad:
        name: str
        shape: Union[List[int], int]

    lake = sluice.Lake(empty_lake)
    with pytest.raises(sluice.InvalidInput, match=r"Bad\.shape"):
        lake.declare(Bad)
    with pytest.raises(sluice.InvalidInput, match="dataclass or a pydantic model"):
        lake.declare(dict)
    assert not (empty_lake / "sluice.toml").exists()


def test_a_pydantic_model_is_declared_like_a_dataclass(empty_lake: pathlib.Path) -> None:
    import pydantic  # the test extra installs it

    class Cell(pydantic.BaseModel):
        plate: str
        count: int
        label: Optional[str] = None

    lake = sluice.Lake(empty_lake)
    assert lake.declare(Cell, key="cell", table="artifacts/cells") == "added"
    id = lake.put("cell", Cell(plate="p1", count=3))
    assert lake.get(id) == {"plate": "p1", "count": 3, "label": None}


RACE_SCRIPT = '''
import dataclasses, sys
import sluice

@dataclasses.dataclass
class Reading:
    sensor: str
    value: float

lake = sluice.Lake(sys.argv[1])
print(lake.declare(Reading))
print(lake.put("reading", Reading(sys.argv[2], 1.5), step=1))
'''


def test_many_processes_declaring_the_same_class_at_once_all_succeed(empty_lake: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # As an array of cluster tasks does, each declaring its types on start.
    import subprocess
    import sys

    script = tmp_path / "race.py"
    script.write_text(RACE_SCRIPT)
    tasks = [
        subprocess.Popen([sys.executable, str(script), str(empty_lake), f"s{i}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(8)
    ]
    outcomes = []
    for task in tasks:
        out, err = task.communicate(timeout=300)
        assert task.returncode == 0, err
        outcomes.append(out.split()[0])
    assert set(outcomes) <= {"added", "unchanged"} and "added" in outcomes, outcomes
    toml = (empty_lake / "sluice.toml").read_text()
    assert toml.count('key = "reading"') == 1, toml
    lake = sluice.Lake(empty_lake)
    rows = lake.sql("SELECT sensor FROM readings ORDER BY sensor").column("sensor").to_pylist()
    assert rows == [f"s{i}" for i in range(8)]
