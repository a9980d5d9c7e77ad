"""How the sandbox's processes confine themselves: namespaces and mounts, capabilities, rlimits
and a seccomp filter. Every system call's result is checked: a mount or prctl the kernel refuses
stops the confinement with an OSError (the program is then never run), never leaves a file system
writable or a limit unset. Standard library only (ctypes for the system calls Python does not
wrap); the worker imports it as a top-level module (see limits.py).

The file system a program sees (both contained modes; the zygote builds it once, `build_root`):
a read-only tmpfs root holding a copy of what the pool names (the Python installation's standard
library, the shared libraries its extension modules load, the C.UTF-8 locale and time zones:
isolation.program_root) and no mount of any host file system but five device nodes (null, zero,
full, random, urandom, in a /dev no program can write to; no terminal), an empty /proc, and per
program a fresh tmpfs on /tmp (`program_namespaces`) that ends with the program's last process."""

from __future__ import annotations

import os
import platform
import resource
import signal
import struct

try:
    from automon.sandbox.limits import Limits
except ImportError:  # run inside the sandbox, beside limits.py
    from limits import Limits

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND = 1, 2, 4, 8, 32, 4096
_MS_REC, _MS_PRIVATE = 16384, 1 << 18
_MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, _PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_SET_CHILD_SUBREAPER = 36
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_EINVAL = 22
# No tty: /dev/tty is the user's terminal wherever the sandbox was started from a shell (unshare mode
# and `none` start no session of their own before the worker does; see pool._start), and through it
# TIOCSTI types commands into the user's shell, reads keystrokes, changes the terminal's modes or
# stops the CLI. Nothing a program is graded on needs a terminal.
DEVICES = ("null", "zero", "full", "random", "urandom")
# Open descriptors per process: Python and the standard library need a handful; each pipe buffers
# up to 64 KiB of kernel memory that no process's resident size shows, so this and the task limit
# bound what a program can hold there (sockets, which could hold far more, are refused outright).
NOFILE = 64
# Files and directories a program may create in its /tmp (the tmpfs's nr_inodes): about 10 MB of the
# kernel's inode and dentry caches at most; the tests of HumanEval and MBPP create none.
TMP_INODES = 8192

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


def setns(fd: int, flags: int) -> None:
    check(_lib().setns(fd, flags), "setns")


def prctl(option: int, arg: int) -> None:
    check(_lib().prctl(option, arg, 0, 0, 0), f"prctl({option})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    check(_lib().mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def map_ids(uid: int, gid: int) -> None:
    """After unshare(CLONE_NEWUSER): map this process's ids to themselves (what an unprivileged
    process may write), so that it keeps its identity and holds capabilities in the new namespace."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def _bind_readonly(source: str, target: str) -> None:
    """Bind `source` at `target`, read-only. The remount keeps the flags the kernel locks on a
    mount that came from a more privileged namespace (nosuid, nodev, noexec): asking to drop
    one fails with EPERM, which check() turns into an error."""
    mount(source, target, None, _MS_BIND)
    locked = os.statvfs(target).f_flag & (os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC)
    mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | locked)
    if not os.statvfs(target).f_flag & os.ST_RDONLY:
        raise OSError(f"{target} is still writable after its read-only remount")


def build_root(entries: list[list[str]]) -> tuple[int, tuple[int, int]]:
    """Once, in the zygote (it holds capabilities in its own user namespace): a mount namespace of
    its own whose root is a new tmpfs holding a copy of `entries` at their own paths (["dir", path],
    ["file", path]: its contents, mode less its write and set-id bits, and times, which the
    standard library's bytecode is checked against; ["link", target, path]: a symbolic link;
    isolation.program_root lists them), the device nodes in DEVICES, an empty /proc and /tmp,
    read-only once built. Nothing of a host file system is bound into it: a lookup of a missing
    name creates a negative dentry of this tmpfs, which tmpfs never keeps (its dentries are deleted
    on their last reference), instead of one the host's file system would cache with no bound
    (docs/security.md). Every program's mount namespace is a copy of it. Returns a descriptor of
    the /proc that was there (for the zygote's accounting; programs never hold it), and of this
    mount namespace and the caller's PID namespace (to come back to after each program's, see
    program_namespaces)."""
    unshare(CLONE_NEWNS)
    mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    new = "/tmp"  # a directory that exists in every mode; the new root's tmpfs covers it here only
    # No size: the zygote fills it from a list it was given, and it is read-only before any program runs.
    mount("tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    for entry in entries:
        if entry[0] == "dir":
            os.makedirs(new + entry[1], 0o755, exist_ok=True)
        elif entry[0] == "file":
            _copy_file(entry[1], new + entry[1])
        elif entry[0] == "link":
            os.symlink(entry[1], new + entry[2])
        else:
            raise ValueError(f"unknown root entry {entry!r}")
    os.mkdir(f"{new}/dev", 0o755)
    for name in DEVICES:  # the host's nodes, bound: a node made here would not work (nodev)
        if os.path.exists(f"/dev/{name}"):
            os.close(os.open(f"{new}/dev/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
            # Read-only: the node is the host's inode, which a program mapped to its owner could
            # otherwise chmod; reading and writing a device still work on a read-only mount.
            _bind_readonly(f"/dev/{name}", f"{new}/dev/{name}")
    for name in ("proc", "tmp", ".old"):
        os.mkdir(f"{new}/{name}", 0o755)
    _pivot_root(new, f"{new}/.old")
    os.chdir("/")
    check(_lib().umount2(b"/.old", _MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    if not os.statvfs("/").f_flag & os.ST_RDONLY:
        raise OSError("the new root is still writable after its read-only remount")
    return proc, namespaces_of(proc)


def _copy_file(path: str, target: str) -> None:
    """Copy `path` to `target` (in the kernel: sendfile), read-only, with its times. A file this
    process cannot read is left out: no program could read it through a bind mount either."""
    try:
        src = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except PermissionError:
        return
    try:
        st = os.fstat(src)
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, st.st_mode & 0o555)
        try:
            done = 0
            while done < st.st_size:
                n = os.sendfile(dst, src, done, st.st_size - done)
                if n == 0:
                    raise OSError(f"{path} shrank while it was copied into the programs' root")
                done += n
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _pivot_root(new: str, old: str) -> None:
    nr = _ARCHES[platform.machine()][1]["pivot_root"]
    check(_lib().syscall(nr, new.encode(), old.encode()), "pivot_root")


def program_namespaces(memory_mb: int, run_dir: str) -> int:
    """In the zygote, before it forks a program: a new mount namespace (a copy of build_root's)
    with a fresh tmpfs of `memory_mb` on /tmp, and a new PID namespace for the process it forks
    next, the program, which is its PID 1. Nothing a program writes or creates can reach the next
    one: its files live on a tmpfs only its own namespace holds (freed with its last reference),
    its process ids start afresh (no counter carries over), and when it exits the kernel kills
    every process left in its namespace. Returns a descriptor of that /tmp (its usage counts
    against the program's memory). Once it forked the program, the caller goes back to its own
    namespaces with own_namespaces."""
    unshare(CLONE_NEWNS | CLONE_NEWPID)
    # nr_inodes: a tmpfs's inodes and dentries are kernel memory outside `size` (a loop of empty
    # directories made 1.3 M of them, +1.3 GiB of slab, at memory_mb=64); TMP_INODES bounds them.
    mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={memory_mb}m,nr_inodes={TMP_INODES},mode=0700")
    os.mkdir(run_dir, 0o700)
    return os.open("/tmp", os.O_RDONLY | os.O_DIRECTORY)


def namespaces_of(proc_fd: int) -> tuple[int, int]:
    """Descriptors of this process's mount namespace and of the PID namespace its next children
    go into, to come back to them (own_namespaces)."""
    return (os.open("self/ns/mnt", os.O_RDONLY, dir_fd=proc_fd),
            os.open("self/ns/pid_for_children", os.O_RDONLY, dir_fd=proc_fd))


def own_namespaces(own: tuple[int, int]) -> None:
    """Back from program_namespaces: to the zygote's mount namespace, and its own PID namespace
    for its next children (the kernel refuses a second CLONE_NEWPID until then)."""
    setns(own[0], CLONE_NEWNS)
    setns(own[1], CLONE_NEWPID)


def drop_caps() -> None:
    """Drop every capability (the program would otherwise hold all of them in its namespace)."""
    import ctypes
    libc = _lib()
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == _EINVAL:  # past the last capability this kernel knows
                break
            check(-1, f"drop capability {cap} from the bounding set")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    check(libc.capset(header, data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def rlimits(limits: Limits, tasks: int | None) -> None:
    # ITIMER_PROF counts this process's CPU time with sub-second precision; its SIGPROF ends the
    # process, unless it is its PID namespace's init (a contained program's main process), which
    # ignores it: the zygote's count of the tree's CPU time ends that one. RLIMIT_CPU (whole
    # seconds) backs both up: its hard limit's SIGKILL reaches an init too.
    signal.setitimer(signal.ITIMER_PROF, limits.cpu_limit)
    backstop = int(limits.cpu_limit) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (backstop, backstop + 1))
    mem = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if tasks is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


# ---------------------------------------------------------------------------------------------
# seccomp: what a program may not ask the kernel for, even unprivileged. Without it a program could
# create a user namespace of its own (allowed to any user) and, holding capabilities there, mount
# tmpfs file systems whose memory no limit of the sandbox counts, or nest a PID namespace; or hold
# kernel memory that no process's resident size shows (socket buffers: a few hundred socket pairs
# held over 1 GB with memory_mb=128; pipes grown with F_SETPIPE_SZ).

_ERRNO, _ALLOW, _KILL = 0x00050000, 0x7FFF0000, 0x80000000  # SECCOMP_RET_*
_EPERM, _ENOSYS = 1, 38
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF opcodes
_NS_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen",
           "fsconfig", "fsmount", "fspick", "mount_setattr", "keyctl", "add_key", "request_key", "bpf",
           "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
           "ptrace", "process_vm_readv", "process_vm_writev",
           # memory no limit counts: unmapped memfds and secret memory, and System V / POSIX IPC objects
           # that outlive the program (in the worker's IPC namespace, shared with later programs)
           "memfd_create", "memfd_secret", "shmget", "msgget", "semget", "mq_open",
           # every socket: there is no network to reach, their buffers are kernel memory, and AF_VSOCK
           # is not namespaced at all
           "socket", "socketpair",
           # kernel-global counters a program could move and the next one read (a few bits from one
           # program to the next in the same worker): pipes take their inode number from the
           # kernel's get_next_ino() counter (as aio contexts do), a pidfd's inode is the pidfs
           # number of every process the machine forked, sysinfo shows the load average, free memory
           # and task count. A program's stdio and call pipes are made for it before the filter.
           "pipe", "pipe2", "io_setup", "pidfd_open", "sysinfo",
           # state shared by the programs a pool grades at the same time, which all see one read-only
           # root: file locks (one flocks a standard-library file, another reads the lock exactly with
           # F_GETLK: a channel between concurrent samples) and notifications of the root's files
           # (inotify on the standard library shows the grader opening the modules its tests use)
           "flock", "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
           # extended attributes: a tmpfs stores them in kernel memory that no limit counts
           "setxattr", "lsetxattr", "fsetxattr",
           # other processes of the sandbox, the zygote above all: compare their kernel objects, or
           # change their priority, scheduling policy, CPU affinity or I/O priority (PRIO_USER reaches
           # every process of the uid: a starved zygote starves every later program of the pool)
           "kcmp", "setpriority", "sched_setscheduler", "sched_setparam", "sched_setaffinity", "sched_setattr",
           "ioprio_set",
           # futexes whose flags hide in a structure (futex_waitv) or that take no FUTEX_PRIVATE_FLAG check
           # here (futex_wake, futex_wait, futex_requeue): see _FUTEX_PRIVATE
           "futex_waitv", "futex_wake", "futex_wait", "futex_requeue")
_F_SETPIPE_SZ = 1031
# fcntl commands refused: pipe growth (kernel memory), and the lock, lease and notification state a file
# of the shared root would carry from one program to another graded at the same time (F_GETLK 5, F_SETLK
# 6, F_SETLKW 7, the open-file-description locks 36-38, F_SETLEASE 1024, F_GETLEASE 1025, F_NOTIFY 1026).
_FCNTL_DENIED = (_F_SETPIPE_SZ, 5, 6, 7, 36, 37, 38, 1024, 1025, 1026)
# ioctl commands that act on a terminal beyond the program's own output: TIOCSTI pushes bytes into
# its input queue (commands typed into the user's shell), TIOCLINUX's subcodes do the same on a
# virtual console. A program has no terminal to reach (no /dev/tty, no session shared with the
# user's), so this is a second wall, not the first.
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
# futex() without FUTEX_PRIVATE_FLAG keys its wait queue by the mapped file and offset: two programs that
# map one file of the shared read-only root could wait and wake each other (and count the waiters woken)
# across workers. Private futexes (every lock, condition and thread join of Python and glibc within a
# process) are keyed by the process's own address space.
_FUTEX_PRIVATE = 128
_CLONE_PIDFD = 0x1000
# Per architecture: the AUDIT_ARCH value, the syscall numbers, and the first number of a second
# ABI sharing the architecture value (x86_64's x32), refused whole.
_ARCHES = {
    "x86_64": (0xC000003E, dict(unshare=272, setns=308, mount=165, umount2=166, pivot_root=155, clone=56,
                                clone3=435, open_tree=428, move_mount=429, fsopen=430, fsconfig=431,
                                fsmount=432, fspick=433, mount_setattr=442, keyctl=250, add_key=248,
                                request_key=249, bpf=321, perf_event_open=298, userfaultfd=323,
                                io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
                                ptrace=101, process_vm_readv=310, process_vm_writev=311, memfd_create=319,
                                memfd_secret=447, shmget=29, msgget=68, semget=64, mq_open=240, socket=41,
                                socketpair=53, fcntl=72, ioctl=16, pipe=22, pipe2=293, io_setup=206,
                                pidfd_open=434, sysinfo=99, flock=73, inotify_init=253, inotify_init1=294,
                                inotify_add_watch=254, fanotify_init=300, fanotify_mark=301, setxattr=188,
                                lsetxattr=189, fsetxattr=190, kcmp=312, setpriority=141, sched_setscheduler=144,
                                sched_setparam=142, sched_setaffinity=203, sched_setattr=314, ioprio_set=251,
                                prlimit64=302, futex=202, futex_waitv=449, futex_wake=454, futex_wait=455,
                                futex_requeue=456), 0x40000000),
    "aarch64": (0xC00000B7, dict(unshare=97, setns=268, mount=40, umount2=39, pivot_root=41, clone=220,
                                 clone3=435, open_tree=428, move_mount=429, fsopen=430, fsconfig=431,
                                 fsmount=432, fspick=433, mount_setattr=442, keyctl=219, add_key=217,
                                 request_key=218, bpf=280, perf_event_open=241, userfaultfd=282,
                                 io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
                                 ptrace=117, process_vm_readv=270, process_vm_writev=271, memfd_create=279,
                                 memfd_secret=447, shmget=194, msgget=186, semget=190, mq_open=180, socket=198,
                                 socketpair=199, fcntl=25, ioctl=29, pipe2=59, io_setup=0,
                                 pidfd_open=434, sysinfo=179, flock=32, inotify_init1=26, inotify_add_watch=27,
                                 fanotify_init=262, fanotify_mark=263, setxattr=5, lsetxattr=6, fsetxattr=7,
                                 kcmp=272, setpriority=140, sched_setscheduler=119, sched_setparam=118,
                                 sched_setaffinity=122, sched_setattr=274, ioprio_set=30, prlimit64=261, futex=98,
                                 futex_waitv=449, futex_wake=454, futex_wait=455, futex_requeue=456), None),
}


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as BPF instructions (code, jt, jf, k): another architecture's system calls are
    fatal; the calls in _DENIED, ioctl(TIOCSTI or TIOCLINUX), fcntl's commands in _FCNTL_DENIED, a futex
    without FUTEX_PRIVATE_FLAG, prlimit64 on another process and clone with a namespace flag or
    CLONE_PIDFD fail with EPERM; clone3 with ENOSYS (its flags are behind a pointer, out of a filter's reach; the C
    library then uses clone)."""
    arch, nr, second_abi = _ARCHES[machine]
    prog = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _KILL), (_LD_ABS, 0, 0, 0)]
    if second_abi is not None:
        prog += [(_JGE, 0, 1, second_abi), (_RET, 0, 0, _ERRNO | _ENOSYS)]
    for name in (n for n in _DENIED if n in nr):  # aarch64 has no pipe(), only pipe2()
        prog += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, _ERRNO | _EPERM)]
    prog += [(_JEQ, 0, 1, nr["clone3"]), (_RET, 0, 0, _ERRNO | _ENOSYS)]
    prog += _arg_in(nr["ioctl"], 24, (_TIOCSTI, _TIOCLINUX))  # args[1], the request
    prog += _arg_in(nr["fcntl"], 24, _FCNTL_DENIED)  # args[1], the command
    prog += [(_JEQ, 0, 4, nr["futex"]), (_LD_ABS, 0, 0, 24),  # args[1], the operation and its flags
             (_JSET, 0, 1, _FUTEX_PRIVATE), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | _EPERM)]
    # prlimit64 on another process (pid != 0): the zygote's limits are not the program's to change
    prog += [(_JEQ, 0, 4, nr["prlimit64"]), (_LD_ABS, 0, 0, 16),  # args[0], the pid
             (_JEQ, 0, 1, 0), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | _EPERM)]
    prog += [(_JEQ, 0, 3, nr["clone"]), (_LD_ABS, 0, 0, 16),  # args[0], its low 32 bits (little-endian)
             (_JSET, 0, 1, _NS_FLAGS | _CLONE_PIDFD), (_RET, 0, 0, _ERRNO | _EPERM), (_RET, 0, 0, _ALLOW)]
    return prog


def _arg_in(nr: int, offset: int, values: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """System call `nr` fails with EPERM when the 32-bit argument at `offset` of seccomp_data is one of
    `values`, and is allowed otherwise; any other call falls through to the next rule."""
    n = len(values)
    rest = [(_LD_ABS, 0, 0, offset)] + [(_JEQ, n - i, 0, v) for i, v in enumerate(values)]
    rest += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | _EPERM)]
    return [(_JEQ, 0, len(rest), nr)] + rest


class Seccomp:
    """The filter, built once (in the zygote, before any program forks) and installed by each
    program with one prctl: building it (a ctypes structure class, the packed instructions) costs
    a forked program about half a millisecond of CPU, on every one of the thousands a build runs."""

    def __init__(self):
        import ctypes
        machine = platform.machine()
        if machine not in _ARCHES:
            raise OSError(f"no seccomp filter for {machine}: the sandbox supports {', '.join(_ARCHES)}")
        prog = seccomp_program(machine)
        self._buf = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *ins) for ins in prog))

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self._fprog = SockFprog(len(prog), ctypes.addressof(self._buf))
        self._ref = ctypes.byref(self._fprog)
        self._prctl = _lib().prctl

    def install(self) -> None:
        """Install the filter on this process (and all it forks); needs no_new_privs (drop_caps)."""
        check(self._prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._ref, 0, 0), "seccomp")
