"""contracts.upload: dated prefix, no overwrite, retries, read-back verification; file:// and a real S3 server."""

import datetime as dt
import hashlib
import json

import pytest

from contracts.reports import upload
from contracts.reports.diff import diff_bundles, load_bundle
from contracts.reports.bundle import BundleError
from contracts.reports.upload import (
    UploadError,
    UploadExistsError,
    dated_destination,
    download_bundle,
    list_bundles,
    list_incomplete_uploads,
    upload_bundle,
)

NAME = "nightly-20260102T030405Z-cpu"


def _bundle(root, name=NAME):
    folder = root / name
    (folder / "candidates" / "oracle").mkdir(parents=True)
    summary = {"candidate": "oracle", "contract": "aiter", "against": None, "status": "pass", "rows_checked": 10,
               "clauses": {"tie_order": 0}, "families": {"all_equal": {"rows": 10, "mismatched_rows": 0, "clauses": {}}}}  # fmt: skip
    (folder / "candidates" / "oracle" / "summary.json").write_text(json.dumps(summary))
    (folder / "candidates" / "oracle" / "mismatches.csv").write_bytes(b"family,row\n" + bytes(range(256)))
    (folder / "junit.xml").write_text("<testsuites/>")
    nightly = {"schema_version": 1, "name": name, "execution_target": {"backend": "cpu", "device_model": "x"},
               "candidates": {"oracle": {"status": "pass", "bundle": "candidates/oracle"}}, "pairs": {}}  # fmt: skip
    (folder / "nightly.json").write_text(json.dumps(nightly))
    return folder


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_dated_destination_uses_the_bundle_stamp():
    assert dated_destination("s3://b/p/", NAME) == f"s3://b/p/2026/01/02/{NAME}"
    when = dt.datetime(2025, 12, 31, tzinfo=dt.timezone.utc)
    assert dated_destination("file:///x", "plain-name", when) == "file:///x/2025/12/31/plain-name"


def test_file_upload_copies_verifies_and_refuses_to_overwrite(tmp_path, capsys):
    bundle = _bundle(tmp_path / "local")
    store = tmp_path / "store"
    where = upload_bundle(bundle, f"file://{store}")
    assert where == f"file://{store}/2026/01/02/{NAME}"
    printed = capsys.readouterr().out
    assert "sha256 verified" in printed and where in printed
    assert _files(store / "2026" / "01" / "02" / NAME) == _files(bundle)

    with pytest.raises(UploadExistsError, match="already exists; refusing to overwrite"):
        upload_bundle(bundle, f"file://{store}")

    listed = list_bundles(f"file://{store}")
    assert [(b.name, b.day) for b in listed] == [(NAME, "2026/01/02")]
    copy = download_bundle(listed[0].url, tmp_path / "back")
    assert sorted(_files(copy)) == ["candidates/oracle/summary.json", "nightly.json"]  # JSON only by default
    assert not diff_bundles(load_bundle(bundle), load_bundle(listed[0].url)).regressed


class _FlakyFS:
    """Wraps a real filesystem: the first ``fail`` writes raise ``error``, or every write after the first
    ``fail_after`` does (an upload cut off half-way); can corrupt what it writes."""

    def __init__(self, fs, fail=0, error=ConnectionResetError("connection reset by peer"), corrupt=False, fail_after=None):
        self._fs, self.fail, self.error, self.corrupt, self.fail_after, self.writes = fs, fail, error, corrupt, fail_after, []

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def pipe_file(self, path, data, **kw):
        if self.fail or (self.fail_after is not None and len(self.writes) >= self.fail_after):
            self.fail = max(self.fail - 1, 0)
            raise self.error
        self.writes.append(path.rsplit("/", 1)[-1].removeprefix(".").removesuffix(".partial"))  # local files go through a temporary name
        return self._fs.pipe_file(path, data[:-1] if self.corrupt else data, **kw)


def _patched(monkeypatch, **kw):
    real = upload._fs
    holder = {}

    def fake(url, storage_options):
        fs, path = real(url, storage_options)
        holder.setdefault("fs", _FlakyFS(fs, **kw))
        return holder["fs"], path

    monkeypatch.setattr(upload, "_fs", fake)
    return holder


def test_transient_errors_are_retried_with_exponential_backoff(tmp_path, monkeypatch):
    holder = _patched(monkeypatch, fail=3)
    sleeps = []
    upload_bundle(_bundle(tmp_path / "local"), f"file://{tmp_path}/store", sleep=sleeps.append, backoff_s=0.5, log=None)
    assert sleeps == [0.5, 1.0, 2.0]
    assert holder["fs"].writes[-1] == "nightly.json"  # the completion marker goes last
    assert holder["fs"].writes.index("summary.json") > holder["fs"].writes.index("mismatches.csv")


def test_a_persistent_or_permanent_error_fails_with_the_cause(tmp_path, monkeypatch):
    _patched(monkeypatch, fail=10)
    with pytest.raises(UploadError, match=r"after 3 attempt\(s\): ConnectionResetError"):
        upload_bundle(_bundle(tmp_path / "a"), f"file://{tmp_path}/s1", retries=2, sleep=lambda s: None, log=None)
    monkeypatch.undo()
    _patched(monkeypatch, fail=1, error=PermissionError("access denied"))
    sleeps = []
    with pytest.raises(UploadError, match=r"after 1 attempt\(s\): PermissionError"):
        upload_bundle(_bundle(tmp_path / "b"), f"file://{tmp_path}/s2", sleep=sleeps.append, log=None)
    assert sleeps == []


def test_read_back_verification_catches_a_corrupted_write(tmp_path, monkeypatch):
    _patched(monkeypatch, corrupt=True)
    with pytest.raises(UploadError, match="verification failed"):
        upload_bundle(_bundle(tmp_path / "local"), f"file://{tmp_path}/store", log=None)


@pytest.fixture
def s3_server(monkeypatch):
    """A real S3-compatible server (moto) on 127.0.0.1, a free port, stopped at the end."""
    ThreadedMotoServer = pytest.importorskip("moto.server", reason="the test extra's moto is not installed").ThreadedMotoServer

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def test_s3_upload_to_a_real_server(tmp_path, s3_server):
    import boto3
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    client.create_bucket(Bucket="nightly")
    options = {"endpoint_url": s3_server, "key": "testing", "secret": "testing",
               "config_kwargs": {"connect_timeout": 5, "read_timeout": 10, "retries": {"max_attempts": 2}}}  # fmt: skip
    bundle = _bundle(tmp_path)
    where = upload_bundle(bundle, "s3://nightly/router", storage_options=options, retries=2, log=None)
    assert where == f"s3://nightly/router/2026/01/02/{NAME}"

    listed = client.list_objects_v2(Bucket="nightly", Prefix="router/")["Contents"]
    prefix = f"router/2026/01/02/{NAME}/"
    local = _files(bundle)
    assert sorted(o["Key"] for o in listed) == sorted(prefix + rel for rel in local)
    for rel, data in local.items():
        body = client.get_object(Bucket="nightly", Key=prefix + rel)["Body"].read()
        assert hashlib.sha256(body).hexdigest() == hashlib.sha256(data).hexdigest()

    with pytest.raises(UploadExistsError):
        upload_bundle(bundle, "s3://nightly/router", storage_options=options, log=None)
    second = _bundle(tmp_path / "later", name="nightly-20260103T000000Z-cpu")
    upload_bundle(second, "s3://nightly/router", storage_options=options, log=None)
    names = [b.name for b in list_bundles("s3://nightly/router", storage_options=options)]
    assert names == [NAME, "nightly-20260103T000000Z-cpu"]
    old = load_bundle(f"s3://nightly/router/2026/01/02/{NAME}", storage_options=options)
    assert set(old.checks) == {"oracle"}
    s3fs.S3FileSystem.clear_instance_cache()


# ---------------------------------------------------------------- interrupted uploads (issue 22 item 10)


def _cut_off(monkeypatch, bundle, url, after=2, **upload_kw):
    """Upload ``bundle`` to ``url`` but lose the connection for good after ``after`` files (no completion marker)."""
    _patched(monkeypatch, fail_after=after, error=PermissionError("the network went away"))
    with pytest.raises(UploadError, match="PermissionError"):
        upload_bundle(bundle, url, sleep=lambda s: None, log=None, **upload_kw)
    monkeypatch.undo()


def test_an_interrupted_upload_is_listed_refused_by_readers_and_resumed_by_a_retry(tmp_path, monkeypatch, capsys):
    """Before: the cut-off upload left objects and no nightly.json; it was not listed, and every retry
    was refused with "already exists"."""
    bundle = _bundle(tmp_path / "local")
    store = f"file://{tmp_path}/store"
    where = f"{store}/2026/01/02/{NAME}"
    _cut_off(monkeypatch, bundle, store)
    remote = tmp_path / "store" / "2026" / "01" / "02" / NAME
    assert 0 < len(_files(remote)) < len(_files(bundle)) and not (remote / "nightly.json").exists()
    assert list_bundles(store) == []
    assert [(b.url, b.name, b.day) for b in list_incomplete_uploads(store)] == [(where, NAME, "2026/01/02")]
    with pytest.raises(FileNotFoundError, match="incomplete upload"):
        download_bundle(where, tmp_path / "dl")
    with pytest.raises(BundleError, match="incomplete upload"):
        load_bundle(where)

    first = sorted(_files(remote))[0]
    (remote / first).write_bytes(b"half a file")  # a partial object: must be rewritten, not kept
    (remote / "stray.bin").write_bytes(b"not in the bundle")
    assert upload_bundle(bundle, store) == where
    assert "resumed an incomplete upload" in capsys.readouterr().out
    assert _files(remote) == _files(bundle)
    assert list_incomplete_uploads(store) == [] and [b.name for b in list_bundles(store)] == [NAME]
    with pytest.raises(UploadExistsError, match="already exists; refusing to overwrite"):
        upload_bundle(bundle, store, log=None)


def test_a_local_marker_is_never_half_written(tmp_path, monkeypatch):
    """On file:// each file is written under a temporary name and renamed: a crash mid-write leaves no marker."""
    holder = _patched(monkeypatch)
    upload_bundle(_bundle(tmp_path / "local"), f"file://{tmp_path}/store", log=None)
    remote = tmp_path / "store" / "2026" / "01" / "02" / NAME
    assert not list(remote.rglob("*.partial")) and holder["fs"].writes[-1] == "nightly.json"


def test_s3_interrupted_upload_is_listed_and_resumed(tmp_path, s3_server, monkeypatch):
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    import boto3

    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket="cut")
    options = {"endpoint_url": s3_server, "key": "testing", "secret": "testing"}
    bundle = _bundle(tmp_path)
    _cut_off(monkeypatch, bundle, "s3://cut/router", after=3, storage_options=options, retries=0)
    (incomplete,) = list_incomplete_uploads("s3://cut/router", storage_options=options)
    assert incomplete.name == NAME and list_bundles("s3://cut/router", storage_options=options) == []
    upload_bundle(bundle, "s3://cut/router", storage_options=options, log=None)
    assert list_incomplete_uploads("s3://cut/router", storage_options=options) == []
    assert [b.name for b in list_bundles("s3://cut/router", storage_options=options)] == [NAME]
    assert set(load_bundle(f"s3://cut/router/2026/01/02/{NAME}", storage_options=options).checks) == {"oracle"}
    s3fs.S3FileSystem.clear_instance_cache()
