"""Issue 32 item 6: the nightly gate fires on an s3 store as on file://.

``nightly --upload s3://... --compare-previous`` fetched only the previous
bundle's JSON files, then found its data files missing ("incomplete bundle"),
recorded the comparison as an error and exited 0 on a pass-to-fail night.
Here against a real S3-compatible server (moto) on 127.0.0.1.
"""

import json
import os

import pytest

from contracts.commands import nightly
from tests.broken_candidates import _route
from tests.test_upload import s3_server  # noqa: F401 -- the moto server fixture

BROKEN = "ROUTER_CONTRACTS_TEST_BROKEN"


def breaks_when_told(scores, bias, topk, renormalize, rsf):
    """Correct, unless the environment says to scale twice (one candidate name, a pass night and a fail night)."""
    return _route(scores, bias, topk, renormalize, rsf, scale_times=2 if os.environ.get(BROKEN) else 1)


def _night(out):
    return nightly.main(["--out", str(out), "--rows", "300", "--candidates", "tests.test_nightly_s3:breaks_when_told",
                         "--upload", "s3://nightly-gate/router", "--compare-previous", "--no-probe", "--no-bench"])  # fmt: skip


# Two nightly runs (each a check of 300+ rows in a worker, an upload and a download): ~20 s on a loaded 2-core machine.
@pytest.mark.slow
def test_a_pass_to_fail_night_on_s3_exits_1(tmp_path, s3_server, monkeypatch):  # noqa: F811
    import boto3
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    import fsspec.config

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)  # botocore reads it when a client is made
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_server})  # fsspec read its FSSPEC_S3_* at import
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket="nightly-gate")  # its own bucket: moto keeps buckets across the servers of one process
    out = tmp_path / "n"
    monkeypatch.delenv(BROKEN, raising=False)
    assert _night(out) == 0
    monkeypatch.setenv(BROKEN, "1")
    assert _night(out) == 1
    second = sorted(p for p in out.iterdir() if p.name.startswith("nightly-"))[-1]
    comparison = json.loads((second / "nightly.json").read_text())["comparison"]
    assert comparison["status"] == "regression", comparison
    assert any("pass -> fail" in r for r in comparison["regressions"])
    s3fs.S3FileSystem.clear_instance_cache()
