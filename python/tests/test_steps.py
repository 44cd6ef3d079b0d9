"""Pipeline steps written as Python functions, run by the installed
``sluice`` in the interpreter beside it (this venv's)."""

from __future__ import annotations

import datetime
import json
import os
import re
import pathlib
import subprocess
import shutil
import sys

import pytest

import sluice
from conftest import sluice_cli

MODULE = '''
import sys
import sluice

@sluice.op(outputs={"metrics": "metric"})
def stats(table, scale=1):
    return {"metrics": {"rows": table.height, "x0": float(table["x"][0]) * scale,
                        "python": sys.prefix}}
'''

PIPELINE = '''
name = "py"

[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 4, rows = 8, seed = 1 }}

[[step]]
name = "stats"
operation = "python"
function = "feats.py:stats"
inputs = {{ table = "gen.data" }}
{outputs}
'''


def test_a_decorated_function_runs_as_a_step_in_the_interpreter_beside_sluice(tmp_path: pathlib.Path) -> None:
    (tmp_path / "feats.py").write_text(MODULE)
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(PIPELINE.format(outputs=""))
    lake_dir = tmp_path / "lake"
    report = json.loads(sluice_cli("run", str(pipeline), "--workers", "2", "--json", lake=lake_dir))
    stats = next(s for s in report["steps"] if s["name"] == "stats")
    assert stats["outputs"] == {"metrics": 4}, report
    lake = sluice.Lake(lake_dir)
    contents = [json.loads(c) for c in lake.sql("SELECT content FROM metrics").column("content").to_pylist()]
    assert sorted(c["rows"] for c in contents) == [8, 8, 8, 8]
    # No `python` in the step: the interpreter is the one the wheel's
    # `sluice` sits beside, this venv's.
    assert {c["python"] for c in contents} == {sys.prefix}
    again = json.loads(sluice_cli("run", str(pipeline), "--json", lake=lake_dir))
    assert next(s for s in again["steps"] if s["name"] == "stats")["dispatched"] == 0


def slurm_is_up() -> bool:
    """Whether a SLURM cluster answers here; CI must have one."""
    try:
        up = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
        answered = up.returncode == 0 and up.stdout.strip() != ""
    except (OSError, subprocess.TimeoutExpired):
        answered = False
    if not answered and os.environ.get("CI"):
        pytest.fail("CI must run the SLURM tests: start SLURM with `bash scripts/slurm.sh up`")
    return answered


def test_slurm_array_tasks_run_python_steps_through_the_installed_command(tmp_path: pathlib.Path) -> None:
    if not slurm_is_up():
        pytest.skip("SLURM is not running here (bash scripts/slurm.sh up starts it)")
    (tmp_path / "feats.py").write_text(MODULE)
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(PIPELINE.format(outputs=""))
    lake_dir = tmp_path / "lake"
    report = json.loads(sluice_cli("run", str(pipeline), "--backend", "slurm", "--json", lake=lake_dir))
    stats = next(s for s in report["steps"] if s["name"] == "stats")
    assert stats["outputs"] == {"metrics": 4}, report
    # Each array task started this venv's Python with `-m sluice`, and the
    # step's function ran in that same interpreter.
    scripts = list(lake_dir.glob("_slurm/**/task.sh"))
    assert scripts, "no SLURM task script was written"
    venv_python = re.compile(re.escape(f"exec '{pathlib.Path(sys.executable).parent}/") + r"python[0-9.]*' '-m' 'sluice' ")
    assert all(venv_python.search(p.read_text()) for p in scripts), scripts[0].read_text()
    contents = [json.loads(c) for c in sluice.Lake(lake_dir).sql("SELECT content FROM metrics").column("content").to_pylist()]
    assert {c["python"] for c in contents} == {sys.prefix}


def test_outputs_that_differ_from_the_declared_ones_are_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "feats.py").write_text(MODULE)
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(PIPELINE.format(outputs='outputs = { metrics = "config" }'))
    done = subprocess.run(
        [shutil.which("sluice") or "sluice", "check", str(pipeline)], capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "differ from what `@sluice.op` declares" in done.stderr, done.stderr


def test_the_decorator_checks_what_it_declares() -> None:
    @sluice.op(outputs={"m": "metric"})
    def f(table):
        return {}

    assert f.__sluice_op__ == {"outputs": {"m": "metric"}}
    with pytest.raises(ValueError, match="identifier"):
        sluice.op(outputs={"not a role": "metric"})
    with pytest.raises(ValueError, match="artifact type"):
        sluice.op(outputs={"m": ""})


TYPED_MODULE = '''
import dataclasses
import datetime
from typing import Optional
import sluice

@dataclasses.dataclass
class TableShape:
    rows: int
    first: float
    seen: datetime.datetime
    note: Optional[str] = None

@sluice.op(outputs={"shapes": "table_shape"})
def shape(table):
    seen = datetime.datetime(2026, 12, 7, tzinfo=datetime.timezone.utc)
    return {"shapes": TableShape(table.height, float(table["x"][0]), seen)}
'''


def test_a_step_returns_instances_of_a_type_declared_from_its_class(tmp_path: pathlib.Path) -> None:
    (tmp_path / "typed.py").write_text(TYPED_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import typed  # the step's own module: the class is declared from it
    finally:
        sys.path.remove(str(tmp_path))
    lake_dir = tmp_path / "lake"
    sluice_cli("init", lake=lake_dir)
    assert sluice.Lake(lake_dir).declare(typed.TableShape) == "added"
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(
        PIPELINE.replace("feats.py:stats", "typed.py:shape").replace("{outputs}", "").replace("{{", "{").replace("}}", "}")
    )
    report = json.loads(sluice_cli("run", str(pipeline), "--json", lake=lake_dir))
    assert next(s for s in report["steps"] if s["name"] == "stats")["outputs"] == {"shapes": 4}, report
    lake = sluice.Lake(lake_dir)
    rows = lake.sql("SELECT artifact_id, rows FROM table_shapes").to_pylist()
    assert sorted(r["rows"] for r in rows) == [8, 8, 8, 8]
    got = lake.get(rows[0]["artifact_id"])
    assert got["seen"] == datetime.datetime(2026, 12, 7, tzinfo=datetime.timezone.utc)
    assert got["note"] is None
