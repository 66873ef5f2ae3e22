"""The data directory's lock: one writing process per data directory.

Two hubs on one directory both append at the segment's end they recovered and overwrite each other's
acknowledged events. The store takes an exclusive flock on `DATA/lock` for as long as it is open and
writes its pid there, so a second one is refused and told who holds it. Readers (`cat`, `segments`,
`verify`, Spark with `path`) take no lock. flock is released by the kernel when the process dies, so a
crashed hub never leaves a stale lock behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from logport.errors import DataDirectoryInUse

LOCK_FILE = "lock"


class DataDirectoryLock:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def acquire(cls, data_dir: str | Path) -> DataDirectoryLock:
        """Lock `data_dir` (created if missing), or raise DataDirectoryInUse naming the holder's pid."""
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        fd = os.open(Path(data_dir) / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise DataDirectoryInUse(str(data_dir), f"logport (pid {holder})" if holder.isdigit()
                                     else "another logport process") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the only descriptor of the open file releases the flock
            self._fd = -1
