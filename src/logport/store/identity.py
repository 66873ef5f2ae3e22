"""A hub's stable identity: a UUID kept in DATA/hub-id, created once, atomically, on the first start.

It names the hub wherever its segments meet another hub's (every hub has a `forward` segment):
in the Spark source's offsets and `hub` column, so a hub that moves to another address, or is
read from its data directory instead of over the network, keeps its offsets.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import uuid
from pathlib import Path

from logport.errors import StoreError

FILE_NAME = "hub-id"
_VALID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


class HubIdentityError(StoreError):
    """DATA/hub-id exists but does not hold an identity (edited, or damaged)."""


def read_hub_identity(data_dir: str | os.PathLike[str]) -> str | None:
    """The identity kept in `data_dir`, or None when it has none yet."""
    path = Path(data_dir) / FILE_NAME
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        return None
    if not _VALID.match(text):
        raise HubIdentityError(f"{path} holds {text[:60]!r}, not a hub identity (a lower-case UUID); "
                               "restore it from a backup, or delete it to give this hub a new identity "
                               "(Spark checkpoints over the old one then start again from the beginning)")
    return text


def ensure_hub_identity(data_dir: str | os.PathLike[str]) -> str:
    """The identity of the hub whose data directory this is; made now if it has none.

    Written to a file of its own, fsync'd, then linked to its name: link() fails when the name exists,
    so of two processes making one at once exactly one wins, and both return the winner's. A crash
    leaves either no hub-id or a whole one (and at most a temporary file, removed on the next try).
    """
    directory = Path(data_dir)
    existing = read_hub_identity(directory)
    if existing is not None:
        return existing
    directory.mkdir(parents=True, exist_ok=True)
    identity = str(uuid.uuid4())
    temporary = directory / f".{FILE_NAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    with open(temporary, "w", encoding="ascii") as f:
        f.write(identity + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        _link_noreplace(temporary, directory / FILE_NAME)
    except FileExistsError:
        pass  # another process made one first: it is the identity
    finally:
        temporary.unlink(missing_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)  # the new name is durable before anyone reads offsets keyed by it
    finally:
        os.close(fd)
    found = read_hub_identity(directory)
    assert found is not None
    return found


_NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK)
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _link_noreplace(source: Path, name: Path) -> None:
    """Give `source` the name `name` unless that exists (FileExistsError). link() where the file system
    has hard links; where it refuses them (EPERM: a FUSE file system, vfat), Linux's renameat2 with
    RENAME_NOREPLACE, which is as atomic and as exclusive (and moves the file instead of linking it)."""
    try:
        os.link(source, name)
    except OSError as e:
        if e.errno not in _NO_HARD_LINKS or isinstance(e, FileExistsError):
            raise
        _rename_noreplace(source, name, e)


def _rename_noreplace(source: Path, name: Path, refused: OSError) -> None:
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux (or a C library before glibc 2.28)
        raise refused from None
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(name), _RENAME_NOREPLACE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"making {name} (the file system refused a hard link: {refused.strerror}): "
                            f"renameat2: {os.strerror(code)}", str(name))
