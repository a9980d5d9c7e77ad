"""confine.py's system calls, each refusal an error: a mount, read-only remount or prctl the kernel
refuses stops the confinement (the program is never run), never leaves a file system writable or a
capability held. The kernel's refusals are simulated (a libc whose calls fail), so this runs
anywhere; test_hostile.py shows the confinement holding in each isolation mode."""

from __future__ import annotations

import ctypes
import errno
import os
from types import SimpleNamespace

import pytest

from automon.sandbox import confine


class Libc:
    """A libc whose mount() and prctl() fail with EPERM where `refuse(flags or option)` says so."""

    def __init__(self, refuse_mount=lambda flags: False, refuse_prctl=lambda option: False):
        self.refuse_mount, self.refuse_prctl, self.mounts = refuse_mount, refuse_prctl, []

    def _result(self, refused: bool) -> int:
        if refused:
            ctypes.set_errno(errno.EPERM)
            return -1
        return 0

    def mount(self, source, target, fstype, flags, data):
        self.mounts.append((target, flags))
        return self._result(self.refuse_mount(flags))

    def prctl(self, option, *args):
        return self._result(self.refuse_prctl(option))

    def capset(self, header, data):
        return 0


def _statvfs(readonly: bool):
    return lambda path: SimpleNamespace(f_flag=os.ST_RDONLY if readonly else 0)


def test_a_refused_mount_is_an_error(monkeypatch):
    monkeypatch.setattr(confine, "_libc", Libc(refuse_mount=lambda flags: True))
    with pytest.raises(OSError) as e:
        confine.mount("tmpfs", "/tmp", "tmpfs", 0, "size=1m")
    assert e.value.errno == errno.EPERM and "/tmp" in str(e.value)


def test_a_refused_read_only_remount_never_leaves_a_writable_bind(monkeypatch):
    """The bind succeeds, its read-only remount is refused (or claims success and leaves the
    mount writable): either is an error, not a writable bind left in the programs' root."""
    libc = Libc(refuse_mount=lambda flags: bool(flags & confine._MS_REMOUNT))
    monkeypatch.setattr(confine, "_libc", libc)
    monkeypatch.setattr(confine.os, "statvfs", _statvfs(readonly=False))
    with pytest.raises(OSError) as e:
        confine._bind_readonly("/usr", "/new/usr")
    assert e.value.errno == errno.EPERM and [t for t, _ in libc.mounts] == [b"/new/usr"] * 2
    monkeypatch.setattr(confine, "_libc", Libc())  # the remount "succeeds", the mount stays writable
    with pytest.raises(OSError, match="still writable"):
        confine._bind_readonly("/usr", "/new/usr")
    monkeypatch.setattr(confine.os, "statvfs", _statvfs(readonly=True))  # control: read-only afterwards
    confine._bind_readonly("/usr", "/new/usr")


@pytest.mark.parametrize("option", [confine.PR_SET_NO_NEW_PRIVS, confine._PR_CAPBSET_DROP])
def test_a_refused_prctl_is_an_error(monkeypatch, option):
    monkeypatch.setattr(confine, "_libc", Libc(refuse_prctl=lambda o: o == option))
    with pytest.raises(OSError) as e:
        confine.drop_caps()
    assert e.value.errno == errno.EPERM
    monkeypatch.setattr(confine, "_libc", Libc(refuse_prctl=lambda o: o == confine.PR_SET_DUMPABLE))
    with pytest.raises(OSError):
        confine.prctl(confine.PR_SET_DUMPABLE, 0)
