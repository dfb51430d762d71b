"""The one-process lock where the filesystem cannot lock a folder: the run goes on, unlocked, with a warning."""

from __future__ import annotations

import errno
import logging

import pytest

from raysim.base import sole_runner as module
from raysim.base.sole_runner import sole_runner


def test_a_folder_its_filesystem_cannot_lock_is_used_unlocked_with_a_warning(tmp_path, monkeypatch, caplog):
    """NFS cannot take an exclusive lock on a folder opened read-only (EBADF); the failure is the kernel's, so it is
    raised here as the kernel would raise it."""

    def nfs_flock(fd, operation):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(module.fcntl, "flock", nfs_flock)
    ran = []
    with caplog.at_level(logging.WARNING, logger="raysim"), sole_runner(tmp_path, "run x", "resume it", in_place=True):
        ran.append(True)
    assert ran and "cannot be locked on its filesystem" in caplog.text
    # a lock file (a sweep's, a comparison's) opens read-write, which NFS locks: a failure there is raised
    with pytest.raises(OSError), sole_runner(tmp_path / "sweep", "sweep s", "resume it"):
        pass
