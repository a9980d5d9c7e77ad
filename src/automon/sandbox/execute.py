"""Inside a sandboxed process: run a program the way `python prog.py` would, or the grader's
setup and tests with the program's functions as remote calls (see channel.Channel).

Standard library only; the worker imports it as a top-level module (see limits.py)."""

from __future__ import annotations

import atexit
import builtins
import linecache
import sys
import traceback

try:
    from automon.sandbox.channel import Channel, Remote, serve_calls
except ImportError:  # run inside the sandbox, beside channel.py
    from channel import Channel, Remote, serve_calls


def run_program(program: str, calls: tuple[int, int] | None) -> int:
    """Run the program as __main__ (graded: then answer the grader's calls); its exit status."""
    atexit._clear()  # only the program's own handlers run at exit
    sys.argv = [""]
    sys.excepthook = sys.__excepthook__
    glb = {"__name__": "__main__", "__builtins__": builtins, "__file__": "<program>"}
    after = (lambda: serve_calls(glb, *calls)) if calls else None
    return run_as_main(program, glb, "<program>", after)


def run_grader(spec: dict, calls: tuple[int, int]) -> int:
    """Trusted setup, then the tests with the program's functions as remote calls (never a line of
    the program); the grader's exit status. Which names are the program's is the task's choice
    (`remote`, and names neither the setup, the tests nor the builtins define), never the
    program's: it cannot rebind a name of the setup or a builtin here."""
    atexit._clear()
    sys.argv = [""]
    sys.excepthook = sys.__excepthook__
    channel = Channel(*calls)
    glb = {"__name__": "__main__", "__builtins__": builtins}

    def setup():
        if spec.get("setup"):
            linecache.cache["<setup>"] = (len(spec["setup"]), None, spec["setup"].splitlines(True), "<setup>")
            exec(compile(spec["setup"], "<setup>", "exec"), glb)
        for name in spec.get("remote", []):
            if not (type(name) is str and name.isidentifier()):
                raise ValueError(f"a remote name must be an identifier, got {name!r}")
            glb[name] = Remote(channel, name)
        for name in _global_names(spec["tests"]):  # used by the tests, defined by none of them
            if name not in glb and not hasattr(builtins, name):
                if name in sys.stdlib_module_names:  # `math.isclose` in a test: the solution imported it
                    try:
                        glb[name] = __import__(name)
                        continue
                    except ImportError:
                        pass
                glb[name] = Remote(channel, name)

    return run_as_main(spec["tests"], glb, "<tests>", before=setup)


def _global_names(src: str) -> list[str]:
    try:
        todo, names = [compile(src, "<tests>", "exec")], []
    except SyntaxError:
        return []
    while todo:
        code = todo.pop()
        names += code.co_names
        todo += [c for c in code.co_consts if hasattr(c, "co_names")]
    return sorted(set(names))


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    try:
        print(e.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def run_as_main(program: str, glb: dict, filename: str, after=None, before=None) -> int:
    """Run `program` like `python program.py` would and return its exit status. `before` runs
    first (the grader's setup); `after` (the program's call server) once the module code finished,
    before interpreter shutdown."""
    # Lets tracebacks quote the program's source lines, as they would for a file.
    linecache.cache[filename] = (len(program), None, program.splitlines(True), filename)
    try:
        if before is not None:
            before()
        exec(compile(program, filename, "exec"), glb)
        if after is not None:
            after()
        code = 0
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException as e:
        code = 1
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        e.__traceback__ = tb  # hide this function's frame, as `python program.py` would
        try:
            if sys.excepthook is sys.__excepthook__:
                # The same report, but through linecache, which knows the program's source (the
                # C default hook only reads source lines from files).
                traceback.print_exception(type(e), e, tb)
            else:
                sys.excepthook(type(e), e, tb)
        except SystemExit as hook_exit:  # CPython honours SystemExit raised inside the hook
            code = _exit_code(hook_exit)
        except BaseException:
            print("Error in sys.excepthook:", file=sys.stderr)
            traceback.print_exc()
            print("\nOriginal exception was:", file=sys.stderr)
            traceback.print_exception(type(e), e, tb)
    # Interpreter shutdown order: join non-daemon threads, run atexit handlers, flush stdio.
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    return code


