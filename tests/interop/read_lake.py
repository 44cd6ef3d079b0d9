"""Read every table of a sluice lake with Python deltalake and polars.

Usage: read_lake.py LAKE_DIR EXPECTED_JSON

EXPECTED_JSON maps each table path to what sluice wrote:
  {"artifacts/metrics": {"schema": <Delta schema JSON>, "partition_columns": [...],
                         "rows": [{column: value, ...}, ...]}}
Binary values are lowercase hex. Exits non-zero, naming the table and the
difference, if any reader disagrees.
"""

import json
import sys
from datetime import datetime, timezone

import polars as pl
from deltalake import DeltaTable


def micros(value):
    """A timestamp as microseconds since the epoch (UTC), from a datetime or
    from the RFC 3339 text sluice's JSON output uses."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    delta = value - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def normalize(value, column, timestamps):
    if value is None:
        return None
    if column in timestamps:
        return micros(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def canonical_rows(rows, timestamps):
    return sorted(
        json.dumps({k: normalize(v, k, timestamps) for k, v in r.items()}, sort_keys=True) for r in rows
    )


def main(lake, expected_path):
    with open(expected_path) as f:
        expected = json.load(f)
    failures = []
    for path, want in sorted(expected.items()):
        uri = f"{lake}/{path}"
        dt = DeltaTable(uri)
        got_fields = [(f["name"], f["type"], f["nullable"]) for f in json.loads(dt.schema().to_json())["fields"]]
        want_fields = [(f["name"], f["type"], f["nullable"]) for f in want["schema"]["fields"]]
        timestamps = {name for name, kind, _ in want_fields if kind == "timestamp"}
        if got_fields != want_fields:
            failures.append(f"{path}: deltalake schema {got_fields} != {want_fields}")
        if list(dt.metadata().partition_columns) != want["partition_columns"]:
            failures.append(f"{path}: partitions {dt.metadata().partition_columns} != {want['partition_columns']}")

        arrow_rows = dt.to_pyarrow_table().to_pylist()
        want_rows = canonical_rows(want["rows"], timestamps)
        if canonical_rows(arrow_rows, timestamps) != want_rows:
            failures.append(f"{path}: deltalake rows differ:\n  got  {canonical_rows(arrow_rows, timestamps)}\n  want {want_rows}")

        df = pl.read_delta(uri)
        if sorted(df.columns) != sorted(name for name, _, _ in want_fields):
            failures.append(f"{path}: polars columns {df.columns}")
        if canonical_rows(df.to_dicts(), timestamps) != want_rows:
            failures.append(f"{path}: polars rows differ:\n  got  {canonical_rows(df.to_dicts(), timestamps)}\n  want {want_rows}")
        print(f"ok {path}: {len(arrow_rows)} rows, {len(got_fields)} columns")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
