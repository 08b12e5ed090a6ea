"""A small tmpfs a test mounts, to fill a disk for real (root only; skipped elsewhere)."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MIB = 1 << 20


@contextmanager
def small_tmpfs(mount: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``mount`` (made), unmounted afterwards."""
    mount.mkdir(parents=True)
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(
            "cannot mount a small tmpfs to fill (needs root or CAP_SYS_ADMIN): "
            + (made.stderr.strip() or f"mount exited {made.returncode}")
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill_up(path: Path) -> int:
    """A file (another process's, say) that takes every free byte; its size."""
    written = 0
    for chunk in (b"\1" * MIB, b"\1" * 4096):  # then the last pages
        with path.open("ab", buffering=0) as file:
            while True:
                try:
                    written += file.write(chunk)
                except OSError as error:
                    assert error.errno == errno.ENOSPC, error
                    break
    return written
