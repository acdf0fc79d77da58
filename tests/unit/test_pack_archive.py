"""Pack archives: the build is reproducible, and extraction refuses hostile archives while streaming, with no
file written outside its directory and bounded memory (measured here with tracemalloc)."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from jobengine.packs.archive import Limits, build, extract
from jobengine.packs.errors import InvalidPack, UnsafeArchive
from support.packs import raw_tar, write_pack


def test_build_twice_gives_the_same_bytes_and_digest(tmp_path: Path) -> None:
    folder = write_pack(tmp_path)
    first = build(folder)
    # Other mtimes, a stray __pycache__ and .pyc, other permissions: the same archive.
    os.utime(folder / "hello" / "tasks.py", (1, 1))
    (folder / "hello" / "__pycache__").mkdir()
    (folder / "hello" / "__pycache__" / "tasks.cpython-311.pyc").write_bytes(b"junk")
    (folder / "hello" / "tasks.py").chmod(0o600)
    second = build(folder)
    assert first.data == second.data and first.sha256 == second.sha256
    assert first.files == 3
    with tarfile.open(fileobj=io.BytesIO(first.data), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["hello/__init__.py", "hello/tasks.py", "jobengine-pack.yaml"]
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" and m.mode == 0o644 for m in members)
    assert first.data[4:8] == b"\x00\x00\x00\x00"  # gzip header mtime
    (folder / "hello" / "tasks.py").write_text("async def greet(ctx):\n    return 2\ndef shout(ctx): ...\n")
    assert build(folder).sha256 != first.sha256


def test_build_refuses_what_would_not_travel(tmp_path: Path) -> None:
    folder = write_pack(tmp_path)
    (folder / "link.py").symlink_to(folder / "hello" / "tasks.py")
    with pytest.raises(InvalidPack, match="symlink"):
        build(folder)
    (folder / "link.py").unlink()
    (folder / "hello" / "tasks.py").unlink()
    with pytest.raises(InvalidPack) as info:
        build(folder)
    assert info.value.field == "tasks.greet.entry"
    with pytest.raises(InvalidPack) as info:
        build(tmp_path / "nope")
    assert info.value.field == "directory"


def test_extract_round_trips_a_built_pack(tmp_path: Path) -> None:
    built = build(write_pack(tmp_path / "src"))
    names = extract(io.BytesIO(built.data), tmp_path / "out")
    assert sorted(names) == ["hello/__init__.py", "hello/tasks.py", "jobengine-pack.yaml"]
    assert (tmp_path / "out" / "hello" / "tasks.py").read_text() == (
        tmp_path / "src" / "hello-1.0.0" / "hello" / "tasks.py"
    ).read_text()


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def _device(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    info.devmajor, info.devminor = 1, 3
    return info


HOSTILE = {
    "dotdot": [_file("ok.txt"), _file("../x")],
    "nested-dotdot": [_file("a/../../x")],
    "absolute": [_file("/abs")],
    "symlink": [_link("evil", "/etc/passwd")],
    "symlink-then-write": [_link("d", ".."), _file("d/x")],
    "hardlink": [_link("h", "/etc/passwd", tarfile.LNKTYPE)],
    "device": [_device("null")],
    "duplicate": [_file("a"), _file("a", b"y")],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_members_are_refused_and_nothing_is_left(tmp_path: Path, case: str) -> None:
    data = raw_tar(HOSTILE[case])
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(UnsafeArchive):
        extract(io.BytesIO(data), work / "out")
    assert list(work.iterdir()) == []  # neither the target nor a temporary directory
    assert not (tmp_path / "x").exists() and not (tmp_path / "abs").exists()


def _bomb(expanded: int) -> bytes:
    """One member of ``expanded`` zero bytes, compressed as a stream (never held whole in memory)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:
        info = tarfile.TarInfo("zeros.bin")
        info.size = expanded
        gz.write(info.tobuf(format=tarfile.USTAR_FORMAT))
        block = bytes(1 << 20)
        left = expanded
        while left:
            n = min(left, len(block))
            gz.write(block[:n])
            left -= n
        gz.write(bytes(1024))
    return buf.getvalue()


def test_a_compression_bomb_is_stopped_while_streaming_with_bounded_memory(tmp_path: Path) -> None:
    data = _bomb(200 * 1024 * 1024)  # 200 MiB of zeros
    assert len(data) * 1000 < 200 * 1024 * 1024  # over 1000 to 1 (gzip's ceiling is ~1030:1)
    for limits, message in (
        (Limits(max_ratio=100.0), "expands more than 100 to 1"),  # the ratio trips first
        (Limits(max_ratio=10_000.0, max_expanded=8 * 1024 * 1024), "expands to more than"),  # the size does
    ):
        tracemalloc.start()
        try:
            with pytest.raises(UnsafeArchive, match=message):
                extract(io.BytesIO(data), tmp_path / "out", limits)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 * 1024 * 1024, peak  # a few 64 KiB buffers, not the expanded size
        assert list(tmp_path.iterdir()) == []


def test_a_10000_to_1_bomb_is_refused_by_default(tmp_path: Path) -> None:
    # 10,000 to 1 as a nested stream: a small gzip whose content is itself highly compressible is not
    # needed; the default 200:1 ratio refuses anything near it once past 1 MiB expanded.
    data = _bomb(64 * 1024 * 1024)
    ratio = 64 * 1024 * 1024 / len(data)
    assert ratio > 900
    with pytest.raises(UnsafeArchive, match="to 1"):
        extract(io.BytesIO(data), tmp_path / "out")


def _empty_file_headers(count: int) -> bytes:
    """``count`` tar headers of empty files d/000000, d/000001, ...: one header made by tarfile, then its
    name digits and checksum patched (tarfile takes ~30 us a header; this, ~2)."""
    template = bytearray(tarfile.TarInfo("d/000000").tobuf(format=tarfile.USTAR_FORMAT))
    template[148:156] = b" " * 8
    base = sum(template) - sum(b"000000")
    out = bytearray()
    for i in range(count):
        digits = b"%06d" % i
        template[2:8] = digits
        template[148:156] = b"%06o\x00 " % (base + sum(digits))
        out += template
        template[148:156] = b" " * 8
    return bytes(out)


def test_100000_entries_are_refused_at_the_limit(tmp_path: Path) -> None:
    data = gzip.compress(_empty_file_headers(100_000) + bytes(1024), mtime=0)
    tracemalloc.start()
    try:
        with pytest.raises(UnsafeArchive, match="more than 10000 members"):
            extract(io.BytesIO(data), tmp_path / "out")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, peak
    assert list(tmp_path.iterdir()) == []


def test_compressed_size_is_counted_on_the_bytes_read(tmp_path: Path) -> None:
    data = raw_tar([_file("big.bin", os.urandom(300_000))])  # incompressible: ~300 KB compressed
    with pytest.raises(UnsafeArchive, match="larger than 100000 bytes"):
        extract(io.BytesIO(data), tmp_path / "out", Limits(max_compressed=100_000))


def test_not_a_tar_gz_is_invalid(tmp_path: Path) -> None:
    for junk in (b"not gzip at all", gzip.compress(b"not a tar" * 100)):
        with pytest.raises(InvalidPack) as info:
            extract(io.BytesIO(junk), tmp_path / "out")
        assert info.value.field == "archive"
    assert list(tmp_path.iterdir()) == []
