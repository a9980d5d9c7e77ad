"""How a sandboxed process confines itself: namespaces and mounts, capabilities, rlimits and a
seccomp filter. Standard library only (ctypes for the system calls Python does not wrap); the
worker imports it as a top-level module (see worker.py)."""

from __future__ import annotations

import os
import platform
import resource
import signal
import struct

try:
    from automon.sandbox.wire import ISOLATION_UNSHARE, Limits
except ImportError:  # run inside the sandbox, beside wire.py
    from wire import ISOLATION_UNSHARE, Limits

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND = 2, 4, 8, 32, 4096
_MS_REC, _MS_PRIVATE = 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, _PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_SET_CHILD_SUBREAPER = 36
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2

_libc = None


def _lib():
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def check(rc: int, what: str) -> None:
    if rc != 0:
        import ctypes
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    check(_lib().unshare(flags), "unshare")


def prctl(option: int, arg: int) -> None:
    check(_lib().prctl(option, arg, 0, 0, 0), f"prctl({option})")


def map_ids(uid: int, gid: int) -> None:
    """After unshare(CLONE_NEWUSER): map this process's ids to themselves (what an unprivileged
    process may write), so that it keeps its identity and holds capabilities in the new namespace."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def readonly_everything() -> None:
    """In a program's mount namespace (unshare mode): remount every mount read-only."""
    with open("/proc/self/mountinfo") as f:
        points = [ln.split()[4] for ln in f]
    for p in sorted(set(points), key=len):
        p = p.replace("\\040", " ")
        _lib().mount(None, p.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | 1, None)


def drop_caps() -> None:
    """Drop every capability (the program would otherwise hold all of them in its namespace)."""
    import ctypes
    libc = _lib()
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    check(libc.capset(header, data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def zygote_mounts(mode: str) -> int:
    """Once, in the zygote (it holds capabilities in its own user namespace): a mount namespace of
    its own, which the programs it forks share, with a tmpfs on /tmp (their working space, emptied
    after each program) and /proc, /dev/shm, /run hidden under empty ones; in unshare mode every
    other mount read-only too (bwrap's already are). Returns a descriptor of the /proc that was
    there, for the zygote's own accounting (programs never hold it)."""
    libc = _lib()
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount private")
    if mode == ISOLATION_UNSHARE:
        readonly_everything()
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1m,mode=0700"), "mount /tmp")
    for hide in (b"/proc", b"/dev/shm", b"/run"):
        if os.path.isdir(hide):
            check(libc.mount(b"tmpfs", hide, b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                              b"size=4k,mode=0555"), f"hide {hide.decode()}")
    return proc


def size_tmp(memory_mb: int) -> None:
    """Set the size of the programs' /tmp (a program's files count against its memory)."""
    check(_lib().mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_REMOUNT | _MS_NOSUID | _MS_NODEV,
                       f"size={memory_mb}m".encode()), "resize /tmp")


def rlimits(limits: Limits, tasks: int | None) -> None:
    # ITIMER_PROF counts this process's CPU time with sub-second precision; its SIGPROF ends the
    # process. RLIMIT_CPU (whole seconds) backs it up should the program reset the timer.
    signal.setitimer(signal.ITIMER_PROF, limits.cpu_limit)
    backstop = int(limits.cpu_limit) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (backstop, backstop + 1))
    mem = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if tasks is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))


# ---------------------------------------------------------------------------------------------
# seccomp: what a program may not ask the kernel for, even unprivileged. Without it a program could
# create a user namespace of its own (allowed to any user) and, holding capabilities there, mount
# tmpfs file systems whose memory no limit of the sandbox counts, or nest a PID namespace.

_ERRNO, _ALLOW, _KILL = 0x00050000, 0x7FFF0000, 0x80000000  # SECCOMP_RET_*
_EPERM, _ENOSYS = 1, 38
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF opcodes
_NS_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen",
           "fsconfig", "fsmount", "fspick", "mount_setattr", "keyctl", "add_key", "request_key", "bpf",
           "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
           "ptrace", "process_vm_readv", "process_vm_writev",
           # memory no limit counts: unmapped memfds, and System V / POSIX IPC objects that outlive the
           # program (in the worker's IPC namespace, shared with later programs)
           "memfd_create", "shmget", "msgget", "semget", "mq_open")
# Per architecture: the AUDIT_ARCH value, the syscall numbers, and the first number of a second
# ABI sharing the architecture value (x86_64's x32), refused whole.
_ARCHES = {
    "x86_64": (0xC000003E, dict(unshare=272, setns=308, mount=165, umount2=166, pivot_root=155, clone=56,
                                clone3=435, open_tree=428, move_mount=429, fsopen=430, fsconfig=431,
                                fsmount=432, fspick=433, mount_setattr=442, keyctl=250, add_key=248,
                                request_key=249, bpf=321, perf_event_open=298, userfaultfd=323,
                                io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
                                ptrace=101, process_vm_readv=310, process_vm_writev=311, memfd_create=319,
                                shmget=29, msgget=68, semget=64, mq_open=240), 0x40000000),
    "aarch64": (0xC00000B7, dict(unshare=97, setns=268, mount=40, umount2=39, pivot_root=41, clone=220,
                                 clone3=435, open_tree=428, move_mount=429, fsopen=430, fsconfig=431,
                                 fsmount=432, fspick=433, mount_setattr=442, keyctl=219, add_key=217,
                                 request_key=218, bpf=280, perf_event_open=241, userfaultfd=282,
                                 io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
                                 ptrace=117, process_vm_readv=270, process_vm_writev=271, memfd_create=279,
                                 shmget=194, msgget=186, semget=190, mq_open=180), None),
}


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as BPF instructions (code, jt, jf, k): another architecture's system calls are
    fatal; the calls in _DENIED and clone with a namespace flag fail with EPERM; clone3 with ENOSYS
    (its flags are behind a pointer, out of a filter's reach; the C library then uses clone)."""
    arch, nr, second_abi = _ARCHES[machine]
    prog = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _KILL), (_LD_ABS, 0, 0, 0)]
    if second_abi is not None:
        prog += [(_JGE, 0, 1, second_abi), (_RET, 0, 0, _ERRNO | _ENOSYS)]
    for name in _DENIED:
        prog += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, _ERRNO | _EPERM)]
    prog += [(_JEQ, 0, 1, nr["clone3"]), (_RET, 0, 0, _ERRNO | _ENOSYS)]
    prog += [(_JEQ, 0, 3, nr["clone"]), (_LD_ABS, 0, 0, 16),  # args[0], its low 32 bits (little-endian)
             (_JSET, 0, 1, _NS_FLAGS), (_RET, 0, 0, _ERRNO | _EPERM), (_RET, 0, 0, _ALLOW)]
    return prog


def seccomp() -> None:
    """Install the filter on this process (and all it forks); needs no_new_privs (drop_caps)."""
    import ctypes
    machine = platform.machine()
    if machine not in _ARCHES:
        raise OSError(f"no seccomp filter for {machine}: the sandbox supports {', '.join(_ARCHES)}")
    prog = seccomp_program(machine)
    buf = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *ins) for ins in prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(buf))
    check(_lib().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")
