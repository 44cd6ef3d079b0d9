"""A lake in S3 (the moto server `.ci/run` starts), read and written from
Python with the `AWS_*` variables every Delta reader takes."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
import uuid

import pytest

import sluice
from conftest import sluice_cli

MOTO = f"127.0.0.1:{os.environ.get('SLUICE_MOTO_PORT', '5555')}"


@pytest.fixture
def s3_lake(monkeypatch: pytest.MonkeyPatch) -> str:
    bucket = f"py-{uuid.uuid4().hex[:12]}"
    try:
        urllib.request.urlopen(urllib.request.Request(f"http://{MOTO}/{bucket}", method="PUT"), timeout=5)
    except (urllib.error.URLError, OSError) as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the S3 tests: moto is not answering on {MOTO} ({e}); bash scripts/moto.sh up")
        pytest.skip(f"moto is not running on {MOTO} (bash scripts/moto.sh up starts it)")
    for name, value in {
        "AWS_ENDPOINT_URL": f"http://{MOTO}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "sluice",
        "AWS_SECRET_ACCESS_KEY": "sluice-secret-key",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    url = f"s3://{bucket}/lakes/py"
    sluice_cli("init", lake=url)
    return url


def test_a_lake_in_s3_is_read_and_written_like_a_folder(s3_lake: str) -> None:
    lake = sluice.Lake(s3_lake)
    assert lake.root.startswith("s3://")
    metric = lake.put("metric", {"loss": 0.5}, step=1)
    assert lake.get(metric) == {"loss": 0.5}
    cli = sluice_cli("sql", "--format", "csv", "SELECT artifact_id FROM metrics", lake=s3_lake)
    assert metric in cli
    assert lake.sql("SELECT count(*) AS n FROM metrics").column("n").to_pylist() == [1]
    frame = lake.table("metrics").collect()
    assert frame["artifact_id"].to_list() == [metric]


def test_storage_options_reach_the_lake_and_polars_without_the_environment(
    s3_lake: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {
        "aws_endpoint_url": os.environ["AWS_ENDPOINT_URL"],
        "allow_http": "true",
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "aws_region": os.environ["AWS_REGION"],
    }
    for name in ("AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.delenv(name)
    lake = sluice.Lake(s3_lake, storage_options=options)
    metric = lake.put("metric", {"loss": 0.25}, step=1)
    assert lake.get(metric) == {"loss": 0.25}
    assert lake.table("metrics").collect()["artifact_id"].to_list() == [metric]
    with pytest.raises(sluice.SluiceError, match="aws_regoin"):
        sluice.Lake(s3_lake, storage_options={**options, "aws_regoin": "x"})
