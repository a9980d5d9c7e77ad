"""The sandbox worker's zygote (worker.py says how the processes fit together): forked at start-up
before the worker reads a single job, it builds the programs' file system once and forks each program
into fresh namespaces, confined, and watches its tree. Standard library only; imported by worker.py
as a top-level module (see limits.py)."""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys
import time
import traceback

try:
    from automon.sandbox import confine
    from automon.sandbox.execute import run_program
    from automon.sandbox.limits import ISOLATION_NONE, Limits
    from automon.sandbox.protocol import sock_recv, sock_send
    from automon.sandbox.watch import Proc, descendants, namespace_members, remove_tree, spawn, tree_usage
except ImportError:  # run inside the sandbox, beside the modules
    import confine
    from execute import run_program
    from limits import ISOLATION_NONE, Limits
    from protocol import sock_recv, sock_send
    from watch import Proc, descendants, namespace_members, remove_tree, spawn, tree_usage

# The worker's own modules (isolation.WORKER_FILES), taken out of a program's sys.modules: as for any
# script, none is importable.
OWN_MODULES = ("limits", "protocol", "codec", "channel", "execute", "confine", "watch", "zygote", "grader")
_SCAN_S = 0.02  # how often the zygote sums a running program tree's CPU time and memory
_RUN_DIR = "/tmp/run"  # a program's cwd and TMPDIR in contained modes (on its own tmpfs)

# Imported by the zygote so that programs find them already loaded (a child inherits them):
# `typing` alone costs ~9 ms per import and most HumanEval prompts start with `from typing import`.
# Not `random`, whose per-fork reseeding hook would slow every fork down.
_PRELOAD = ("typing", "re", "math", "collections", "heapq", "itertools", "functools", "bisect", "string",
            "copy", "cmath", "array", "ctypes")


def _program(mode: str, limits: Limits, source_fd: int, calls: tuple[int, int] | None, tasks: int,
             seccomp: "confine.Seccomp | None") -> int:
    """The program's own process: read its source, confine itself, run it (and, graded, answer
    the grader's calls)."""
    chunks, off = [], 0
    while chunk := os.pread(source_fd, 1 << 20, off):
        chunks.append(chunk)
        off += len(chunk)
    os.close(source_fd)
    program = b"".join(chunks).decode("utf-8", "surrogatepass")
    if mode != ISOLATION_NONE:
        confine.rlimits(limits, tasks)
        confine.drop_caps()
        seccomp.install()
        os.chdir(_RUN_DIR)
        os.environ["TMPDIR"] = _RUN_DIR
    else:
        confine.rlimits(limits, None)
    for name in OWN_MODULES:  # as for any script: not importable
        sys.modules.pop(name, None)
    return run_program(program, calls)


class _Zygote:
    """Serves the worker's requests on `sock`, one program at a time. Contained, it is the init of
    the PID namespace the programs' own namespaces nest in."""

    def __init__(self, mode: str, base: str, sock: socket.socket | None, root: list):
        self.mode, self.base, self.sock, self.n = mode, base, sock, 0
        self.contained = mode != ISOLATION_NONE
        self.me = os.getpid()
        self.seccomp = None
        if self.contained:
            self.proc_fd, self.own_ns = confine.build_root(root)
            self.seccomp = confine.Seccomp()  # built once; each program only installs it
        else:
            self.proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)

    def serve(self) -> None:
        while True:
            try:
                req, fds = sock_recv(self.sock)
            except EOFError:
                return
            try:
                result = self.run(req, fds)
            except Exception as e:  # one program must never stop the worker: it is reported as failed
                result = ["exited", 1, None, "", f"[sandbox: the program could not be run: {type(e).__name__}: {e}]\n",
                          0.0, 0.0]
            sock_send(self.sock, result)

    def run(self, req: dict, fds: list[int]) -> list:
        self.n += 1
        limits = Limits(**req["limits"])
        source_fd, calls = fds[0], (tuple(fds[1:3]) if req["graded"] else None)
        t0 = time.monotonic()
        # Tasks of the sandbox's user in the zygote's user namespace while the program runs: the
        # process that waits for the zygote, the zygote, and the program's own.
        tasks = 2 + limits.processes
        run_dir = _RUN_DIR if self.contained else os.path.join(self.base, str(self.n))
        tmp_fd = proc = None
        try:
            if self.contained:
                # Fresh mount and PID namespaces: the program, the first process forked into them,
                # is their PID 1 (see confine.program_namespaces).
                tmp_fd = confine.program_namespaces(limits.memory_mb, run_dir)
                try:
                    proc = spawn(lambda: _program(self.mode, limits, source_fd, calls, tasks, self.seccomp), limits,
                                 tuple(fds))
                finally:
                    confine.own_namespaces(self.own_ns)
            else:
                os.mkdir(run_dir, 0o700)

                def uncontained():
                    os.chdir(run_dir)
                    os.environ["TMPDIR"] = run_dir
                    return _program(self.mode, limits, source_fd, calls, tasks, None)

                proc = spawn(uncontained, limits, tuple(fds))
            _close(fds)
            timed_out = self._watch(proc, limits, t0 + limits.timeout_s, tmp_fd)
        finally:
            _close(fds)
            self._kill_tree()
            if proc is not None:
                proc.finish()
            if tmp_fd is not None:
                os.close(tmp_fd)  # the program's mount namespace, and its tmpfs, go with this last reference
            if not self.contained:
                self._reap()
                remove_tree(run_dir)
        result = proc.result(t0, timed_out)
        proc.close()
        return result

    def _watch(self, proc: Proc, limits: Limits, deadline: float, tmp_fd: int | None) -> bool:
        """Wait until the program exited and its pipes closed, or the deadline (True). Every
        _SCAN_S its tree's total CPU time, memory and tasks are checked; once its main process
        ended, the rest of its tree is ended too (left running, it could hold the pipes, and the
        run, open)."""
        next_scan = time.monotonic() + _SCAN_S  # most programs end before their tree is ever scanned
        ended = False
        while not proc.done():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            ready, _, _ = select.select(proc.fds(), [], [], min(left, _SCAN_S))
            proc.step(ready)
            if proc.reaped is not None:
                if not ended:
                    self._kill_tree()
                    ended = True
            elif time.monotonic() >= next_scan:
                next_scan = time.monotonic() + _SCAN_S
                cpu, mem, tasks = self._usage(tmp_fd)
                over = ("cpu" if cpu > limits.cpu_limit * 1.05 + 0.05 else
                        "memory" if mem > limits.memory_mb * 1024 * 1024 else
                        "processes" if tasks > limits.processes else None)
                if over:
                    proc.killed_for = over
                    self._kill_tree()
        return False

    def _usage(self, tmp_fd: int | None) -> tuple[float, int, int]:
        if tmp_fd is None:
            return tree_usage(self.proc_fd, descendants(self.proc_fd, self.me))
        cpu, mem, tasks = tree_usage(self.proc_fd, namespace_members(self.proc_fd))
        st = os.fstatvfs(tmp_fd)  # the program's files are memory too (tmpfs)
        return cpu, mem + (st.f_blocks - st.f_bfree) * st.f_frsize, tasks

    def _kill_tree(self) -> None:
        if self.contained:
            try:
                os.kill(-1, signal.SIGKILL)  # from init: every process of the namespace (and those nested) but itself
            except ProcessLookupError:
                pass
            return
        for _ in range(1000):  # until no live descendant is left (each round kills what the last one forked)
            pids = descendants(self.proc_fd, self.me)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    @staticmethod
    def _reap() -> None:
        while True:  # orphans reparented to this subreaper (isolation none)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return


def _close(fds: list[int]) -> None:
    while fds:
        try:
            os.close(fds.pop())
        except OSError:
            pass


def start_zygote(mode: str, base: str, cgroup_fd: int | None, root: list) -> tuple[socket.socket, int]:
    """Start the zygote, before any job is read; the worker keeps one end of a socket to it.

    Contained, a first child enters a new user and PID namespace and forks the zygote as that
    namespace's init, then only waits for it (the worker itself stays outside: its later children,
    the graders, must not be in the programs' namespace, where the zygote's kill(-1) would reach
    them). The worker and its graders hold no capabilities; the zygote holds them in its own user
    namespace, to build the programs' root and give each program its own namespaces. With `cgroup_fd` (the cgroup.procs of a pids
    cgroup, see cgroups.py) the zygote moves itself into that group before it forks anything."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid:
        theirs.close()
        try:
            sock_recv(ours)  # the zygote confined itself (else it printed why, and is gone)
        except EOFError:
            raise OSError("the zygote could not confine itself (see the worker's stderr)") from None
        return ours, pid
    code = 1
    try:
        ours.close()
        confine.prctl(confine.PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if mode != ISOLATION_NONE:
            uid, gid = os.getuid(), os.getgid()
            confine.unshare(confine.CLONE_NEWUSER | confine.CLONE_NEWPID)
            confine.map_ids(uid, gid)
        zygote = os.fork()
        if zygote:  # this process only waits: it leaves with the zygote
            theirs.close()
            if cgroup_fd is not None:
                os.close(cgroup_fd)
            _, status = os.waitpid(zygote, 0)
            code = os.waitstatus_to_exitcode(status) & 0xFF
        else:
            confine.prctl(confine.PR_SET_PDEATHSIG, int(signal.SIGKILL))
            confine.prctl(confine.PR_SET_DUMPABLE, 0)
            if cgroup_fd is not None:
                os.write(cgroup_fd, b"0")  # "0": the writer itself
                os.close(cgroup_fd)
            if mode == ISOLATION_NONE:
                confine.prctl(confine.PR_SET_CHILD_SUBREAPER, 1)
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # no handler: as init, a program's SIGINT is ignored
            for name in _PRELOAD:
                __import__(name)
            # Objects that exist now are never collected: a child's collections then leave their
            # pages alone instead of writing to (and so copying) every one of them after the fork.
            gc.freeze()
            zygote = _Zygote(mode, base, theirs, root)
            sock_send(theirs, {"ready": True})
            zygote.serve()
            code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)
