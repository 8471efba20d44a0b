"""Copying one file's bytes into another, as cheaply as the file system allows.

In order of preference:

1. a reflink (``ioctl(FICLONE)``): the copy shares the source's blocks until
   either is written, copy-on-write (Btrfs, XFS, bcachefs, ZFS 2.2+, APFS has
   its own call); instant, and no disk space until one side changes;
2. ``copy_file_range``: an in-kernel copy, no bytes through user space (it
   also reflinks or copies server-side where the file system does, e.g. NFS
   4.2);
3. ``sendfile``, then plain reads and writes.

Either way the destination is an independent file: writing to it never
changes the source (unlike a hard link, which *is* the source).
"""

from __future__ import annotations

import errno
import os

# _IOW(0x94, 9, int) from linux/fs.h: "make the destination share the source's blocks".
_FICLONE = 0x40049409
_CHUNK = 8 << 20
# errno values meaning "this way of copying is not available here": try the next one.
_UNSUPPORTED = frozenset(
    {
        errno.EOPNOTSUPP,
        errno.ENOTSUP,
        errno.ENOTTY,
        errno.EXDEV,
        errno.EINVAL,
        errno.ENOSYS,
        errno.EBADF,
        errno.EPERM,
    }
)

REFLINK = "reflink"
COPY = "copy"


def _reflink(src_fd: int, dst_fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return False
    try:
        fcntl.ioctl(dst_fd, _FICLONE, src_fd)
    except OSError as exc:
        if exc.errno in _UNSUPPORTED:
            return False
        raise
    return True


def copy_fd(src_fd: int, dst_fd: int, size: int, *, reflink: bool = True) -> str:
    """Make the file *dst_fd* (empty, open for writing) a copy of *size* bytes of *src_fd*.

    Returns :data:`REFLINK` when the blocks are shared, else :data:`COPY`.
    File offsets of both descriptors are left unspecified.

    Raises:
        OSError: reading or writing failed, or *src_fd* holds fewer than *size*
            bytes (``EIO``: it changed while it was copied).
    """
    if reflink and size and _reflink(src_fd, dst_fd):
        if os.fstat(dst_fd).st_size != size:
            raise OSError(errno.EIO, "the source changed size while it was cloned")
        return REFLINK
    done = _copy_in_kernel(src_fd, dst_fd, size)
    while done < size:
        chunk = os.pread(src_fd, min(_CHUNK, size - done), done)
        if not chunk:
            raise OSError(errno.EIO, "the source is shorter than expected")
        view = memoryview(chunk)
        while view:
            written = os.pwrite(dst_fd, view, done)
            done += written
            view = view[written:]
    return COPY


def _copy_in_kernel(src_fd: int, dst_fd: int, size: int) -> int:
    """Copy with ``copy_file_range`` (else ``sendfile``); return the bytes copied."""
    done = 0
    copy_range = getattr(os, "copy_file_range", None)
    while copy_range is not None and done < size:
        try:
            n = copy_range(src_fd, dst_fd, min(size - done, 1 << 30), done, done)
        except OSError as exc:
            if exc.errno in _UNSUPPORTED and done == 0:
                break  # e.g. across file systems on older kernels: use sendfile
            raise
        if n == 0:
            raise OSError(errno.EIO, "the source is shorter than expected")
        done += n
    if done or size == 0:
        return done
    sendfile = getattr(os, "sendfile", None)
    if sendfile is None:
        return 0
    os.lseek(dst_fd, 0, os.SEEK_SET)
    while done < size:
        try:
            n = sendfile(dst_fd, src_fd, done, min(size - done, 1 << 30))
        except OSError as exc:
            if exc.errno in _UNSUPPORTED and done == 0:
                return 0
            raise
        if n == 0:
            raise OSError(errno.EIO, "the source is shorter than expected")
        done += n
    return done
