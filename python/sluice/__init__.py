"""sluice: a transactional artifact lake and pipeline engine on Delta Lake.

Open a lake and read it in process, at any lake version::

    import sluice

    lake = sluice.Lake("lake")
    lake.table("metrics").collect()               # a polars LazyFrame
    lake.table("metrics", as_of=3).collect()      # as lake version 3 left it
    lake.sql("SELECT count(*) AS n FROM data")    # a pyarrow Table
    lake.get("3fa9")                              # dict, DataFrame or Path
    lake.put("metric", {"loss": 0.12}, step=1)    # the new artifact's id

Every call runs in the same library the ``sluice`` command runs (no
subprocess), releases the GIL while it reads or writes, and raises a
:class:`SluiceError` subclass carrying the message and help the command
would print.
"""

from __future__ import annotations

import dataclasses as _dataclasses
import datetime as _datetime
import io as _io
import json as _json
import os as _os
import pathlib as _pathlib
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar, Union

from . import _native, _types
from ._native import (
    ArrowStream,
    ArtifactNotFound,
    InvalidInput,
    LakeNotFound,
    QueryError,
    SchemaError,
    SluiceError,
    TimeTravelError,
)

__version__: str = _native.__version__

__all__ = [
    "Lake",
    "Lineage",
    "LineageNode",
    "LineageEdge",
    "Producer",
    "op",
    "ArrowStream",
    "SluiceError",
    "LakeNotFound",
    "ArtifactNotFound",
    "TimeTravelError",
    "SchemaError",
    "InvalidInput",
    "QueryError",
    "__version__",
]

#: A point of the lake to read at: a lake version (``sluice history``
#: lists them), a timezone-aware time, the text ``--as-of`` takes (``"3"``,
#: ``"2026-12-01T08:00:00Z"``, ``"metrics@4,index@5"``), or ``None`` for
#: the latest.
AsOf = Union[int, str, _datetime.datetime, None]

_F = TypeVar("_F", bound=Callable[..., Any])

_TYPES = ("metric", "config", "data", "file_ref")


def op(outputs: Mapping[str, str]) -> Callable[[_F], _F]:
    """Declare the output roles of a pipeline step's function and their
    artifact types, for ``sluice check`` and ``sluice run``::

        @sluice.op(outputs={"metrics": "metric"})
        def stats(table, scale=1):
            return {"metrics": {"rows": table.height}}

    A step running it (``operation = "python"``, ``function =
    "mymodule:stats"``) may then leave ``outputs`` out; if it gives them,
    they must be these. The function is returned unchanged.
    """
    declared = dict(outputs)
    for role, type_key in declared.items():
        if not isinstance(role, str) or not role.isidentifier():
            raise ValueError(f"output role {role!r}: a role is a Python identifier")
        if not isinstance(type_key, str) or not type_key:
            raise ValueError(
                f"output `{role}`: an artifact type ({', '.join(_TYPES)} or a declared type), "
                f"not {type_key!r}"
            )

    def declare(function: _F) -> _F:
        function.__sluice_op__ = {"outputs": declared}  # type: ignore[attr-defined]
        return function

    return declare


_DATA_FORMATS = {".parquet": "parquet", ".csv": "csv", ".arrow": "arrow", ".ipc": "arrow", ".feather": "arrow"}


def _as_of(as_of: AsOf) -> Optional[str]:
    if as_of is None:
        return None
    if isinstance(as_of, bool):
        raise TypeError("as_of: a lake version, a time or a string, not a bool")
    if isinstance(as_of, int):
        return str(as_of)
    if isinstance(as_of, _datetime.datetime):
        return _types.aware_text(as_of, "as_of")
    if isinstance(as_of, str):
        return as_of
    raise TypeError(f"as_of: a lake version, a time or a string, not {type(as_of).__name__}")


@_dataclasses.dataclass(frozen=True)
class Producer:
    """The execution that produced an artifact."""

    execution_run_id: str
    operation: str
    step_name: Optional[str]
    step_number: int
    #: What the execution recorded of what produced it: the sluice build,
    #: host, container, and for a command its program's path and BLAKE3,
    #: for a Python step its function, version and source file's BLAKE3.
    provenance: Optional[Dict[str, Any]] = None


@_dataclasses.dataclass(frozen=True)
class LineageNode:
    """One artifact of a lineage: ``depth`` is its distance from the root,
    negative for ancestors, positive for descendants."""

    id: str
    artifact_type: str
    step: int
    depth: int
    produced_by: Optional[Producer]
    name: Optional[str]


@_dataclasses.dataclass(frozen=True)
class LineageEdge:
    """One derivation: ``target`` was made from ``source`` by an execution."""

    source: str
    target: str
    execution_run_id: str
    source_role: str
    target_role: str


@_dataclasses.dataclass(frozen=True)
class Lineage:
    """The lineage of one artifact (:meth:`Lake.lineage`): every artifact
    reached, by id, and every derivation between them."""

    root: str
    nodes: Dict[str, LineageNode]
    edges: List[LineageEdge]
    #: Whether the walk stopped at its depth with more to go.
    truncated: bool

    @classmethod
    def _from_json(cls, text: str) -> "Lineage":
        graph = _json.loads(text)
        nodes = {}
        for id, node in graph["nodes"].items():
            producer = node.get("produced_by")
            nodes[id] = LineageNode(
                id=node["id"],
                artifact_type=node["artifact_type"],
                step=node["step"],
                depth=node["depth"],
                produced_by=Producer(**producer) if producer else None,
                name=node.get("name"),
            )
        edges = [LineageEdge(**edge) for edge in graph["edges"]]
        return cls(root=graph["root"], nodes=nodes, edges=edges, truncated=graph["truncated"])

    def to_networkx(self) -> "networkx.DiGraph":  # noqa: F821
        """The lineage as a ``networkx.DiGraph`` (nodes carry the
        artifact's fields, edges the derivation's); needs networkx."""
        try:
            import networkx
        except ImportError as e:
            raise ImportError("Lineage.to_networkx needs networkx: pip install networkx") from e
        graph = networkx.DiGraph(root=self.root, truncated=self.truncated)
        for id, node in self.nodes.items():
            graph.add_node(id, **_dataclasses.asdict(node))
        for edge in self.edges:
            graph.add_edge(edge.source, edge.target, **_dataclasses.asdict(edge))
        return graph


class Lake:
    """A sluice lake: a folder, or an ``s3://``, ``az://`` or ``abfss://`` URL.

    A ``Lake`` may be shared between threads. Reads see one consistent
    point of the lake: every table at the versions the lake's commit
    journal records for one lake version, never half of a commit.
    """

    def __init__(
        self,
        root: Union[str, "_os.PathLike[str]"],
        storage_options: Optional[Mapping[str, str]] = None,
    ) -> None:
        """Open the lake at ``root``; :class:`LakeNotFound` if there is none.

        A lake in a store reads its credentials from the environment
        (``AWS_*``, ``AZURE_STORAGE_*``, ``AZURE_CLIENT_*``);
        ``storage_options`` (object_store's names, e.g. ``aws_endpoint``,
        ``aws_region``, ``azure_storage_account_key``) take precedence and
        are passed on to Polars by :meth:`table`.
        """
        self._root = _os.fspath(root)
        self._storage_options = None if storage_options is None else dict(storage_options)
        self._lake = _native.Lake(self._root, self._storage_options)

    @property
    def root(self) -> str:
        """Where the lake is."""
        return self._lake.root

    def tables(self) -> List[str]:
        """The names of the lake's tables (those ``table`` and ``sql`` read)."""
        return self._lake.tables()

    def table(self, name: str, as_of: AsOf = None) -> "polars.LazyFrame":  # noqa: F821
        """Table ``name`` as a Polars ``LazyFrame``, pinned to the Delta
        version the journal records for it at ``as_of`` (default: the
        latest lake version)."""
        import polars

        location, version, lake_version = self._lake.table_location(name, _as_of(as_of))
        if version is None:
            at = "the latest lake version" if as_of is None else f"lake point {as_of!r}"
            raise TimeTravelError(f"table `{name}` did not exist at {at}")
        if self._storage_options is None:
            return polars.scan_delta(location, version=version)
        return polars.scan_delta(location, version=version, storage_options=self._storage_options)

    def declare(
        self,
        cls: type,
        key: Optional[str] = None,
        table: Optional[str] = None,
        identity: Optional[Sequence[str]] = None,
        partition_by_step: bool = True,
    ) -> str:
        """Declare an artifact type from a dataclass or a pydantic model, as
        an ``[[artifact_type]]`` entry of the lake's ``sluice.toml``.

        Each field is a column: ``str`` string, ``int`` int64, ``float``
        float64, ``bool`` bool, ``datetime`` timestamp, ``dict``/``list``
        json; ``Optional[X]`` is nullable. ``key`` defaults to the class
        name in snake case, ``table`` to ``artifacts/<key>s``, ``identity``
        (the columns hashed into an id) to every column. Declaring the
        same class again changes nothing; a class that gained ``Optional``
        fields gives the table those columns. A change the lake cannot take
        (a column's type under existing rows) raises and leaves the file as
        it was. Returns ``"added"``, ``"unchanged"`` or ``"replaced"``;
        :meth:`put` then takes instances of ``cls``::

            @dataclass
            class Sample:
                name: str
                weight: Optional[float] = None

            lake.declare(Sample)
            lake.put("sample", Sample("a", 2.5), step=1)
        """
        entry = _types.declaration(cls, key, table, identity, partition_by_step)
        done = self._lake.declare_type(_json.dumps(entry))
        self._lake = _native.Lake(self._root, self._storage_options)
        return done

    def sql(self, query: str, as_of: AsOf = None) -> "pyarrow.Table":  # noqa: F821
        """Run a SQL statement (DataFusion's dialect) over every table at one
        point of the lake; the rows as a ``pyarrow.Table``."""
        import pyarrow

        return pyarrow.RecordBatchReader.from_stream(self.sql_stream(query, as_of)).read_all()

    def sql_stream(self, query: str, as_of: AsOf = None) -> ArrowStream:
        """:meth:`sql`'s rows as an Arrow C stream, for any Arrow consumer
        (``polars.DataFrame(s)``, ``pyarrow.table(s)``, DuckDB), with the
        lake version and table versions it read."""
        return self._lake.sql(query, _as_of(as_of))

    def get(self, id: str) -> Any:
        """The content of artifact ``id`` (or of a unique prefix of at least
        four hex digits): a ``dict`` for a metric, a config or a declared
        type (its ``timestamp`` columns as aware ``datetime``, its ``json``
        columns as the values they hold), a ``polars.DataFrame`` for data, a ``pathlib.Path`` (a URL
        string in a store) for a file_ref."""
        type_key, content, _ = self._lake.get(id)
        if type_key == "data":
            return _read_table(*content)
        if type_key == "file_ref":
            return content if "://" in content else _pathlib.Path(content)
        record = _json.loads(content)
        if type_key in ("metric", "config"):
            return record
        return _types.from_columns(record, self._lake.column_types(type_key))

    def put(self, type: str, value: Any, step: int = 0) -> str:
        """Put one artifact of ``type`` at ``step``; its id (the same for the
        same content, which is stored once).

        - ``metric``, ``config`` and declared types: a ``dict`` (or, for a
          type declared from a class, an instance of it);
        - ``data``: a ``polars.DataFrame`` or ``pyarrow.Table`` (stored as
          Parquet), or the path of a ``.parquet``, ``.csv`` or ``.arrow``
          file (stored as its bytes);
        - ``file_ref``: the path of a file (hashed; the file stays where it is).
        """
        if type == "data":
            return self._put_data(value, step)
        if type == "file_ref":
            return self._lake.put_file(_os.fspath(value), step)
        value = _types.as_record(value)
        if not isinstance(value, dict):
            raise SchemaError(
                f"a {type} is given as a dict, a dataclass or a pydantic model, "
                f"not {value.__class__.__name__}"
            )
        return self._lake.put_json(type, _json.dumps(value, allow_nan=False), step)

    def _put_data(self, value: Any, step: int) -> str:
        if isinstance(value, (str, _os.PathLike)):
            path = _pathlib.Path(value)
            format = _DATA_FORMATS.get(path.suffix.lower())
            if format is None:
                raise InvalidInput(
                    f"{path}: a data file ends in .parquet, .csv or .arrow (.ipc, .feather)"
                )
            try:
                content = path.read_bytes()
            except OSError as e:
                raise InvalidInput(f"{path}: {e.strerror}") from e
            return self._lake.put_data(content, format, step, path.name)
        buffer = _io.BytesIO()
        if hasattr(value, "write_parquet"):
            value.write_parquet(buffer)
        else:
            import pyarrow
            import pyarrow.parquet

            if not isinstance(value, pyarrow.Table):
                raise SchemaError(
                    "data is given as a polars.DataFrame, a pyarrow.Table or a file's path, "
                    f"not {value.__class__.__name__}"
                )
            pyarrow.parquet.write_table(value, buffer)
        return self._lake.put_data(buffer.getvalue(), "parquet", step)

    def history(self, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """The lake's versions, newest first: each with its time, runs, rows
        added and table versions (what ``sluice history --json`` says)."""
        return _json.loads(self._lake.history(limit))

    def lineage(self, id: str, up: Optional[bool] = None, depth: int = 10) -> Lineage:
        """The lineage of artifact ``id`` (or a unique prefix): its ancestors
        (``up=True``), its descendants (``up=False``) or both (the default),
        at most ``depth`` derivations away; the same graph as ``sluice
        lineage --format json``."""
        direction = "both" if up is None else ("up" if up else "down")
        return Lineage._from_json(self._lake.lineage(id, direction, depth))

    def runs(self) -> List[Dict[str, Any]]:
        """Every pipeline run, newest first: pipeline, status, start and
        each step's counts (what ``sluice runs --json`` says)."""
        return _json.loads(self._lake.runs())

    def status(self, run: Optional[str] = None) -> Dict[str, Any]:
        """The state of run ``run`` (an id or unique prefix; default: the
        latest): each step's units, failures and their errors (what
        ``sluice status --json`` says)."""
        return _json.loads(self._lake.status(run))

    def __repr__(self) -> str:
        return f"sluice.Lake({self.root!r})"


def _read_table(content: bytes, format: str) -> "polars.DataFrame":  # noqa: F821
    import polars

    source = _io.BytesIO(content)
    if format == "parquet":
        return polars.read_parquet(source)
    if format == "csv":
        return polars.read_csv(source)
    try:
        return polars.read_ipc(source)
    except Exception:
        return polars.read_ipc_stream(_io.BytesIO(content))
