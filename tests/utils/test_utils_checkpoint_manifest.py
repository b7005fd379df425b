"""The one "complete" rule: marker, meta.json and a manifest of sizes and SHA-256 checksums; older size-only
manifests still accepted; what each verify level reads."""

import json

import pytest
from loguru import logger

from reasonrl.utils.checkpoint_manifest import (
    COMPLETE_MARKER,
    META_FILE,
    build_manifest,
    check_complete,
    file_checksum,
    is_complete,
)


def make_checkpoint(folder, files, *, manifest=None, step=None):
    """A committed checkpoint written by hand: ``files`` {relative path: bytes}, then meta.json and COMPLETE."""
    folder.mkdir(parents=True)
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    step = int(folder.name.split("_")[1]) if step is None else step
    meta = {"step": step, "files": build_manifest(folder) if manifest is None else manifest}
    (folder / META_FILE).write_text(json.dumps(meta))
    (folder / COMPLETE_MARKER).write_text(json.dumps({"step": step}))
    return folder


@pytest.fixture
def messages():
    seen = []
    sink = logger.add(lambda m: seen.append(str(m)), level="INFO")
    yield seen
    logger.remove(sink)


def test_manifest_records_size_and_sha256_of_every_file(tmp_path):
    path = make_checkpoint(tmp_path / "step_3", {"a.bin": b"abc", "sub/b.bin": b"\0" * 5000})
    manifest = json.loads((path / META_FILE).read_text())["files"]
    assert manifest == {
        "a.bin": {"size": 3, "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        "sub/b.bin": {"size": 5000, "sha256": file_checksum(path / "sub" / "b.bin")},
    }
    assert check_complete(path) is None


def test_checksum_catches_flipped_bytes_that_sizes_miss(tmp_path):
    path = make_checkpoint(tmp_path / "step_1", {"w.bin": b"\1" * 4096})
    (path / "w.bin").write_bytes(b"\1" * 4095 + b"\2")
    assert check_complete(path) == "file w.bin: sha256 differs from the manifest (same size, different content)"
    assert check_complete(path, verify="size") is None and check_complete(path, verify="marker") is None
    (path / "w.bin").write_bytes(b"\1" * 10)
    assert check_complete(path, verify="size") == "file w.bin has 10 bytes, the manifest says 4096"


def test_old_size_only_manifest_is_accepted_by_comparing_sizes(tmp_path, messages):
    path = make_checkpoint(tmp_path / "step_2", {"a.bin": b"abc", "b.bin": b"xy"}, manifest={"a.bin": 3, "b.bin": 2})
    assert check_complete(path) is None
    assert any("2 file(s) without checksums (older format)" in m for m in messages)
    (path / "a.bin").write_bytes(b"ab")
    assert check_complete(path) == "file a.bin has 2 bytes, the manifest says 3"
    (path / "a.bin").unlink()
    assert check_complete(path) == "missing file a.bin"


def test_marker_meta_and_malformed_manifests(tmp_path):
    assert check_complete(tmp_path / "step_1") == "no such directory"
    assert check_complete(make_checkpoint(tmp_path / "x_1", {}, step=1)) == "directory name is not step_<n>"
    assert "name says 5" in check_complete(make_checkpoint(tmp_path / "step_5", {}, step=4))
    bad = make_checkpoint(tmp_path / "step_6", {"a": b"1"}, manifest={"a": "1 byte"})
    assert "manifest entry of a is '1 byte'" in check_complete(bad)
    (bad / META_FILE).write_text("{")
    assert "unreadable" in check_complete(bad)
    (bad / COMPLETE_MARKER).unlink()
    assert "no COMPLETE marker" in check_complete(bad)
    with pytest.raises(ValueError, match="verify='quick'"):
        is_complete(bad, verify="quick")
