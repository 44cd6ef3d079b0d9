"""``sluice.Lake``: the lake read and written in process, checked against
what the ``sluice`` command says of the same lake."""

from __future__ import annotations

import datetime
import json
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import polars
import pyarrow
import pytest

import sluice
from conftest import sluice_cli


def test_pip_install_puts_the_sluice_command_on_path() -> None:
    found = shutil.which("sluice")
    assert found is not None, "pip installed no `sluice` command"
    scripts = pathlib.Path(sys.prefix) / "bin"
    assert pathlib.Path(found).resolve().parent == scripts.resolve()
    out = subprocess.run([found, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"sluice {sluice.__version__}")
    # The same command as a module of this interpreter (how a run starts
    # its workers).
    module = subprocess.run([sys.executable, "-m", "sluice", "--version"], capture_output=True, text=True)
    assert module.returncode == 0 and module.stdout == out


def test_the_command_keeps_the_binarys_exit_statuses_and_streams(tmp_path: pathlib.Path) -> None:
    found = shutil.which("sluice") or "sluice"
    missing = subprocess.run([found, "--lake", str(tmp_path / "none"), "status"], capture_output=True, text=True)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: "), missing.stderr
    assert "sluice init" in missing.stderr, missing.stderr
    usage = subprocess.run([found, "no-such-command"], capture_output=True, text=True)
    assert usage.returncode == 2 and "no-such-command" in usage.stderr
    # Output piped to a reader that stops early ends quietly, as the binary's.
    lake = tmp_path / "lake"
    sluice_cli("init", lake=lake)
    head = subprocess.run(
        f"'{found}' --lake '{lake}' sql --format csv 'SELECT * FROM range(200000)' | head -n 1",
        shell=True, capture_output=True, text=True,
    )
    assert head.returncode == 0 and head.stdout.strip() != "", head.stderr
    assert "Traceback" not in head.stderr and "error" not in head.stderr, head.stderr


def test_every_table_at_every_lake_version_is_what_the_cli_reads(demo_lake: pathlib.Path) -> None:
    lake = sluice.Lake(demo_lake)
    versions = [v["version"] for v in lake.history()]
    assert sorted(versions) == [1, 2, 3, 4]
    counts = {}
    for version in versions:
        for table in ("data", "metrics", "executions", "index"):
            query = f"SELECT count(*) AS n FROM {table}"
            cli = json.loads(sluice_cli("sql", "--as-of", str(version), "--format", "ndjson", query, lake=demo_lake))
            rows = lake.sql(query, as_of=version)
            assert rows.column("n").to_pylist() == [cli["n"]], (table, version)
            frame = lake.table(table, as_of=version).collect()
            assert frame.height == cli["n"], (table, version)
            counts[(table, version)] = cli["n"]
    # The lake grew between its versions, so the points really differ.
    assert counts[("data", 1)] == 12 and counts[("data", 2)] == 24
    assert counts[("metrics", 2)] == 0 and counts[("metrics", 3)] == 12
    # The latest is the last lake version.
    assert lake.table("data").collect().height == counts[("data", 4)]


def test_a_query_says_which_table_versions_it_read(demo_lake: pathlib.Path) -> None:
    lake = sluice.Lake(demo_lake)
    history = {v["version"]: v["table_versions"] for v in lake.history()}
    stream = lake.sql_stream("SELECT count(*) AS n FROM data", as_of=1)
    assert stream.lake_version == 1
    assert stream.table_versions == {"data": history[1]["data"]}
    assert stream.num_rows == 1


def test_as_of_takes_a_time_and_table_versions(demo_lake: pathlib.Path) -> None:
    lake = sluice.Lake(demo_lake)
    times = {
        v["version"]: datetime.datetime.fromisoformat(v["time"].replace("Z", "+00:00"))
        for v in lake.history()
    }
    # Between the second lake version's completion and the third's.
    at = times[2] + (times[3] - times[2]) / 2
    by_time = lake.sql("SELECT count(*) AS n FROM data", as_of=at)
    assert by_time.column("n").to_pylist() == [24]
    pinned = lake.sql("SELECT count(*) AS n FROM data", as_of="data@1")
    assert pinned.column("n").to_pylist() == [12]
    with pytest.raises(sluice.InvalidInput, match="timezone"):
        lake.table("data", as_of=datetime.datetime(2026, 1, 1))


def test_a_time_copied_from_history_reads_that_lake_version(demo_lake: pathlib.Path) -> None:
    lake = sluice.Lake(demo_lake)
    query = "SELECT count(*) AS n FROM executions"
    for version in lake.history():
        by_time = lake.sql(query, as_of=version["time"]).column("n").to_pylist()
        assert by_time == lake.sql(query, as_of=version["version"]).column("n").to_pylist(), version


def test_query_results_cross_as_an_arrow_stream_any_consumer_takes(demo_lake: pathlib.Path) -> None:
    lake = sluice.Lake(demo_lake)
    stream = lake.sql_stream("SELECT artifact_id, origin_step_number FROM data ORDER BY artifact_id")
    by_polars = polars.DataFrame(stream)
    by_arrow = pyarrow.table(stream)
    assert by_polars.height == by_arrow.num_rows == 24
    assert by_polars["artifact_id"].to_list() == by_arrow.column("artifact_id").to_pylist()
    # Read again from its first row.
    assert pyarrow.RecordBatchReader.from_stream(stream).read_all().num_rows == 24


def test_every_type_put_is_got_back_as_its_natural_python_value(
    empty_lake: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    lake = sluice.Lake(empty_lake)
    metric = lake.put("metric", {"loss": 0.25, "epoch": 3}, step=1)
    config = lake.put("config", {"lr": 0.1, "layers": [64, 32]}, step=0)
    frame = polars.DataFrame({"x": [1, 2, 3], "name": ["a", "b", "c"]})
    data = lake.put("data", frame, step=2)
    table = lake.put("data", pyarrow.table({"y": [1.5, 2.5]}), step=2)
    csv = tmp_path / "points.csv"
    csv.write_text("a,b\n1,2\n3,4\n")
    data_file = lake.put("data", csv, step=2)
    kept = tmp_path / "model.bin"
    kept.write_bytes(b"\x00weights")
    file_ref = lake.put("file_ref", kept, step=3)

    assert lake.get(metric) == {"loss": 0.25, "epoch": 3}
    assert lake.get(config) == {"lr": 0.1, "layers": [64, 32]}
    assert lake.get(data).equals(frame)
    assert lake.get(table)["y"].to_list() == [1.5, 2.5]
    assert lake.get(data_file).to_dicts() == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert lake.get(file_ref) == kept
    # A unique prefix names an artifact too.
    assert lake.get(metric[:8]) == {"loss": 0.25, "epoch": 3}

    # The same content is the same artifact, whoever puts it.
    assert lake.put("metric", {"epoch": 3, "loss": 0.25}, step=1) == metric
    cli_id = sluice_cli("put", "--type", "metric", "--step", "1", '{"loss": 0.25, "epoch": 3}', lake=empty_lake)
    assert metric in cli_id
    count = lake.sql("SELECT count(*) AS n FROM metrics").column("n").to_pylist()
    assert count == [1]
    shown = json.loads(sluice_cli("show", metric, "--json", lake=empty_lake))
    assert json.dumps(shown).count("0.25") >= 1


def test_errors_are_exceptions_carrying_the_clis_message(
    empty_lake: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    with pytest.raises(sluice.LakeNotFound) as missing:
        sluice.Lake(tmp_path / "nowhere")
    assert "sluice init" in str(missing.value)
    assert isinstance(missing.value, sluice.SluiceError)

    lake = sluice.Lake(empty_lake)
    with pytest.raises(sluice.ArtifactNotFound):
        lake.get("ffffffffffffffffffffffffffffffff")
    with pytest.raises(sluice.InvalidInput):
        lake.get("not hex")
    with pytest.raises(sluice.QueryError):
        lake.sql("SELEC 1")
    with pytest.raises(sluice.InvalidInput, match="no_such_table"):
        lake.sql("SELECT * FROM no_such_table")
    with pytest.raises(sluice.InvalidInput, match="metrics"):
        lake.table("no_such_table")
    with pytest.raises(sluice.SchemaError):
        lake.put("metric", [1, 2])
    with pytest.raises(sluice.SchemaError):
        lake.put("no_such_type", {"a": 1})
    with pytest.raises(sluice.InvalidInput, match="model.txt"):
        lake.put("data", tmp_path / "model.txt")
    with pytest.raises(sluice.TimeTravelError, match="lake version 7"):
        lake.sql("SELECT 1", as_of=7)
    with pytest.raises(sluice.InvalidInput, match="as_of"):
        lake.sql("SELECT 1", as_of="yesterday")
    with pytest.raises(TypeError):
        lake.sql("SELECT 1", as_of=1.5)  # type: ignore[arg-type]
    # A float that is not JSON is refused before it reaches the lake.
    with pytest.raises(ValueError):
        lake.put("metric", {"loss": float("nan")})
    assert lake.sql("SELECT count(*) AS n FROM index").column("n").to_pylist() == [0]


def test_one_lake_is_shared_by_threads_that_read_and_write(empty_lake: pathlib.Path) -> None:
    lake = sluice.Lake(empty_lake)
    ids: dict[int, str] = {}
    failures: list[BaseException] = []

    def work(n: int) -> None:
        try:
            ids[n] = lake.put("metric", {"n": n}, step=n % 3)
            lake.sql("SELECT count(*) AS n FROM metrics")
            assert lake.get(ids[n]) == {"n": n}
        except BaseException as e:  # noqa: BLE001 — reported below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(set(ids.values())) == 8
    rows = lake.sql("SELECT artifact_id FROM metrics").column("artifact_id").to_pylist()
    assert sorted(rows) == sorted(ids.values())


def test_the_api_explains_itself() -> None:
    for name in ("table", "sql", "sql_stream", "get", "put", "history", "tables"):
        doc = getattr(sluice.Lake, name).__doc__
        assert doc and len(doc.split()) > 8, name
    assert "Lake" in (sluice.__doc__ or "")
    stubs = pathlib.Path(sluice.__file__).with_name("_native.pyi")
    assert stubs.is_file() and pathlib.Path(sluice.__file__).with_name("py.typed").is_file()


def test_the_gil_is_released_while_the_lake_is_read(demo_lake: pathlib.Path) -> None:
    lake = sluice.Lake(demo_lake)
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        start = time.perf_counter()
        lake.sql("SELECT sum(value) AS s FROM generate_series(1, 3000000)")
        end = time.perf_counter()
    finally:
        stop.set()
        ticker.join()
    assert end - start > 0.02, "the query was too short to tell"
    # Another Python thread ran while the call was inside Rust: a call that
    # kept the GIL would let no tick fall strictly inside it.
    inside = [t for t in ticks if start + 0.005 < t < end - 0.005]
    assert len(inside) > 100


def test_the_readmes_python_example_runs(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    text = readme.read_text()
    section = text[text.index("## From Python") :]
    example = section[section.index("```python\n") + len("```python\n") :]
    example = example[: example.index("```")]
    monkeypatch.chdir(tmp_path)
    sluice_cli("demo", "my-demo")
    namespace: dict[str, object] = {}
    exec(compile(example, f"{readme}:From Python", "exec"), namespace)
    lake = namespace["lake"]
    assert isinstance(lake, sluice.Lake)
    assert lake.get(namespace["best"]) is not None


def test_lineage_is_the_clis_graph_as_typed_values(demo_lake: pathlib.Path) -> None:
    lake = sluice.Lake(demo_lake)
    metric = lake.sql("SELECT artifact_id FROM metrics ORDER BY artifact_id LIMIT 1").column(0)[0].as_py()
    for up, direction in ((True, "up"), (False, "down"), (None, "both")):
        graph = lake.lineage(metric, up=up, depth=3)
        args = ["lineage", metric, "--format", "json", "--depth", "3"]
        args.append(f"--{direction}")
        cli = json.loads(sluice_cli(*args, lake=demo_lake))
        assert graph.root == cli["root"] == metric
        assert set(graph.nodes) == set(cli["nodes"])
        assert sorted((e.source, e.target, e.source_role) for e in graph.edges) == sorted(
            (e["source"], e["target"], e["source_role"]) for e in cli["edges"]
        )
    up = lake.lineage(metric[:10], up=True)
    assert up.nodes[metric].depth == 0
    assert up.nodes[metric].produced_by is not None and up.nodes[metric].produced_by.operation == "compute_metrics"
    ancestors = [n for n in up.nodes.values() if n.depth < 0]
    assert ancestors and all(n.artifact_type == "data" for n in ancestors)
    try:
        import networkx
    except ImportError:
        with pytest.raises(ImportError, match="networkx"):
            up.to_networkx()
    else:
        g = up.to_networkx()
        assert isinstance(g, networkx.DiGraph) and g.number_of_nodes() == len(up.nodes)


def test_runs_and_status_are_what_the_cli_says(demo_lake: pathlib.Path) -> None:
    lake = sluice.Lake(demo_lake)
    runs = lake.runs()
    assert runs == json.loads(sluice_cli("runs", "--json", lake=demo_lake))
    assert runs[0]["pipeline"] == "demo"
    status = lake.status()
    assert status == json.loads(sluice_cli("status", "--json", lake=demo_lake))
    assert lake.status(runs[0]["pipeline_run_id"][:8]) == status
    with pytest.raises(sluice.SluiceError):
        lake.status("ffffffffffff")
