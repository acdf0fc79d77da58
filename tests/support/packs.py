"""Pack directories and archives for the pack tests (a real tree on disk, built with the real builder)."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterable
from pathlib import Path

from jobengine.packs.archive import build

HELLO_CODE = """
import asyncio


async def greet(ctx):
    await asyncio.sleep(0)
    return {"greeting": "hello " + ctx.payload["who"], "pack": __name__}


def shout(ctx):
    return ctx.payload["who"].upper()
"""

HELLO_MANIFEST = """name: {name}
version: {version}
description: Greets people{extra}
tasks:
  greet:
    entry: hello.tasks:greet
    queue: {queue}
    max_attempts: 2
    payload_schema:
      type: object
      required: [who]
      properties:
        who: {{type: string}}
  shout:
    entry: hello.tasks:shout
    queue: {queue}
"""


def write_pack(
    root: Path, name: str = "hello", version: str = "1.0.0", *, extra: str = "", queue: str = "packs",
    code: str = HELLO_CODE, manifest: str | None = None,
) -> Path:  # fmt: skip
    """A pack directory under ``root`` (created); returns it."""
    folder = root / f"{name}-{version}{extra.replace(' ', '_')}"
    (folder / "hello").mkdir(parents=True, exist_ok=True)
    (folder / "hello" / "__init__.py").write_text("")
    (folder / "hello" / "tasks.py").write_text(code)
    text = manifest if manifest is not None else HELLO_MANIFEST.format(name=name, version=version, extra=extra,
                                                                       queue=queue)  # fmt: skip
    (folder / "jobengine-pack.yaml").write_text(text)
    return folder


def pack_bytes(root: Path, name: str = "hello", version: str = "1.0.0", **kw: object) -> bytes:
    return build(write_pack(root, name, version, **kw)).data  # type: ignore[arg-type]


def raw_tar(members: Iterable[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]]) -> bytes:
    """A hand-made .tar.gz (for hostile archives the builder would never make)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for m in members:
            if isinstance(m, tuple):
                info, data = m
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(m)
    return buf.getvalue()
