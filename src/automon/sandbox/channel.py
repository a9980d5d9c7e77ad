"""The call channel between a grader (trusted tests) and a program: the tests' `f(x)` becomes a
length-prefixed JSON request on one pipe, the program's answer (a value, or that it raised) comes
back on the other, values through codec.py.

Standard library only, no automon imports (see limits.py)."""

from __future__ import annotations

import json
import os
import struct

try:
    from automon.sandbox.codec import BadValue, decode, encode
except ImportError:  # run inside the sandbox, beside codec.py
    from codec import BadValue, decode, encode

_CALL_HEADER = struct.Struct("!I")
MAX_CALL_MESSAGE = 16 << 20      # one grader <-> program message


def write_call(fd: int, obj) -> None:
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    data = _CALL_HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def read_call(fd: int):
    """One message, or None at EOF / on anything malformed (too long, not JSON)."""
    def exact(n):
        buf = b""
        while len(buf) < n:
            part = os.read(fd, min(n - len(buf), 1 << 20))
            if not part:
                return None
            buf += part
        return buf

    head = exact(_CALL_HEADER.size)
    if head is None:
        return None
    (n,) = _CALL_HEADER.unpack(head)
    if n > MAX_CALL_MESSAGE:
        return None
    body = exact(n)
    try:
        return None if body is None else json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


class ProgramGone(BaseException):
    """Raised in the grader when the program stopped answering (it exited, was killed, or sent
    something that is not an answer). A BaseException: the tests' `except Exception` cannot
    swallow it."""
    __module__ = "__main__"  # tracebacks name it "ProgramGone", as graders read it


class Unverifiable(BaseException):
    """Raised in the grader when the tests ask for something the channel cannot carry to the program
    (a function or another object that is not plain data, as an argument): the sandbox cannot say
    whether the program is right, so the verdict is "unverifiable", never a failure of the program.
    A BaseException: no test swallows it."""
    __module__ = "__main__"


class ProgramFailed(BaseException):
    """Raised in the grader for an exception the program raised in a call, whatever it was: one
    type of its own, so no test's control flow can take it for something else (a StopIteration
    that ends a map() or a generator early, an exception the test catches by name), and a
    BaseException, so no `except Exception` in a test swallows it. `name` is the program's
    exception class name, for reports only."""
    __module__ = "__main__"

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}" if message else name)
        self.name = name


def _exception_name(name) -> str:
    return name if type(name) is str and name.isidentifier() and len(name) <= 100 else "Exception"


class Channel:
    def __init__(self, rfd: int, wfd: int):
        self.rfd, self.wfd, self.gone = rfd, wfd, False

    def call(self, name: str, args: tuple, kwargs: dict):
        if self.gone:
            raise ProgramGone("the program stopped earlier")
        try:
            enc_args = [encode(a) for a in args]
            enc_kw = {str(k): encode(v) for k, v in kwargs.items()}
        except RecursionError:
            raise Unverifiable("an argument is nested too deeply to pass to the program") from None
        for a in enc_args + list(enc_kw.values()):
            what = _opaque_in(a)
            if what is not None:
                raise Unverifiable(f"the tests pass the program a value that is not plain data ({what})")
        try:
            write_call(self.wfd, {"name": name, "args": enc_args, "kwargs": enc_kw})
        except OSError:
            self.gone = True
            raise ProgramGone("the program is not reading calls") from None
        reply = read_call(self.rfd)
        try:
            error, value = self._answer(reply, args)
        except (BadValue, RecursionError) as e:
            self.gone = True
            raise ProgramGone("the program did not answer" if reply is None else f"bad answer from the program: {e}")
        if error is not None:
            raise error
        return value

    @staticmethod
    def _answer(reply, args: tuple):
        """(exception to raise, None) or (None, value), from a reply; BadValue if it is none."""
        if type(reply) is not dict or not reply.keys() <= {"value", "raise", "after"}:
            raise BadValue("not an answer")
        after = reply.get("after") or []
        if type(after) is not list or len(after) > len(args):
            raise BadValue("bad argument state")
        for a, new in zip(args, after):  # arguments the program changed in place
            if new is not None:
                update_in_place(a, decode(new))
        if "raise" in reply:
            err = reply["raise"]
            if type(err) is not list or len(err) != 2 or type(err[1]) is not str:
                raise BadValue("bad exception")
            return ProgramFailed(_exception_name(err[0]), " ".join(err[1][:2000].splitlines())), None
        if "value" not in reply:
            raise BadValue("no value")
        return None, decode(reply["value"])


def update_in_place(old, new) -> None:
    """Make the test's own argument `old` equal to the program's `new`, changing it in place, and the
    lists, dicts and sets inside it too where they are still at the same place (an inner list the
    program sorted in place is the test's same inner list, sorted), so that a test holding a reference
    into its argument sees what a program run in-process would have done to it."""
    if type(old) is list and type(new) is list:
        for i in range(min(len(old), len(new))):
            if type(old[i]) is type(new[i]) and type(old[i]) in (list, dict, set):
                update_in_place(old[i], new[i])
                new[i] = old[i]
        old[:] = new
    elif type(old) is dict and type(new) is dict:
        for k, v in new.items():
            if k in old and type(old[k]) is type(v) and type(v) in (list, dict, set):
                update_in_place(old[k], v)
                new[k] = old[k]
        old.clear()
        old.update(new)
    elif type(old) is set and type(new) is set:
        old.clear()
        old.update(new)


def _opaque_in(x) -> str | None:
    """The type name of the first value in encoded `x` that is not plain data (codec's "opaque"), or None."""
    if type(x) is dict and x.get("$") == "opaque":
        return str(x.get("v"))
    for y in (x.get("v") if type(x) is dict else x if type(x) is list else None) or []:
        found = _opaque_in(y)
        if found is not None:
            return found
    return None


class Remote:
    """A function of the program, as the tests see it: calling it asks the program."""

    def __init__(self, channel: Channel, name: str):
        self._channel, self.__name__ = channel, name

    def __call__(self, *args, **kwargs):
        return self._channel.call(self.__name__, args, kwargs)

    def __repr__(self):
        return f"<program function {self.__name__}>"


def serve_calls(glb: dict, rfd: int, wfd: int) -> None:
    """In the program's process, after its module code ran: answer the grader's calls until it
    closes the channel. Exceptions that are not Exceptions (SystemExit, ...) end the program,
    as they would have ended `python prog.py` running the tests."""
    while True:
        req = read_call(rfd)
        if req is None:
            return
        name = req.get("name") if type(req) is dict else None
        fn = glb.get(name) if type(name) is str else None
        args = [decode(a) for a in req.get("args", [])]
        kwargs = {k: decode(v) for k, v in (req.get("kwargs") or {}).items()}
        try:
            if fn is None:
                raise NameError(f"name {name!r} is not defined")
            value = fn(*args, **kwargs)
            reply = {"value": encode(value)}
        except Exception as e:
            reply = {"raise": [type(e).__name__, str(e)[:2000] if _safe_str(e) else ""]}
        after = [encode(a) if type(a) in (list, dict, set) else None for a in args]
        if any(a is not None for a in after):
            reply["after"] = after
        try:
            write_call(wfd, reply)
        except (ValueError, RecursionError):
            write_call(wfd, {"raise": ["ValueError", "the program's value could not be sent"]})


def _safe_str(e) -> bool:
    try:
        str(e)
        return True
    except Exception:
        return False
