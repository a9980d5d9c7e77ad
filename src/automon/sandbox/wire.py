"""What the sandbox's two sides share: isolation mode names, `Limits`, the parent <-> worker
protocol (length-prefixed JSON, never pickle: a worker's reply is data), and the call channel
between a program and its grader with its value codec.

Standard library only, no automon imports: the worker (worker.py, run as a plain script inside the
sandbox) imports this file as a top-level module, the parent as automon.sandbox.wire.

The codec: encode() runs in the program's process (the program may have tampered with it: what it
sends is still only JSON); decode() runs in the grader and builds fresh built-in objects, so no
object of the program's ever reaches the tests. Anything that is not plain data arrives as an
Opaque value, equal to nothing and unusable as a condition.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import struct
from dataclasses import dataclass

ISOLATION_BWRAP = "bwrap"        # bubblewrap: read-only minimal file system, all namespaces unshared
ISOLATION_UNSHARE = "unshare"    # util-linux unshare: all namespaces, file system remounted read-only
ISOLATION_NONE = "none"          # no isolation at all: only when the user asks for it explicitly

_HEADER = struct.Struct("!Q")
_CALL_HEADER = struct.Struct("!I")
MAX_MESSAGE = 256 << 20          # parent <-> worker protocol message
MAX_CALL_MESSAGE = 16 << 20      # grader <-> program call message
_MAX_DEPTH = 64                  # nesting of an encoded value
_MAX_ITEMS = 1_000_000           # elements drawn from an iterator the program returns


@dataclass(frozen=True)
class Limits:
    """Per-program limits.

    The CPU-time limit defaults to timeout_s. A CPU limit tighter than the wall limit gives
    load-independent verdicts for busy programs: CPU time does not grow when other processes
    compete for the cores, wall time does. A program over its CPU time is killed by SIGPROF; a
    process tree over it in total (a program that forks) by SIGXCPU. memory_mb bounds each
    process's address space and, in contained modes, the resident memory of the whole tree (and
    the size of its /tmp); processes bounds the tasks (processes and threads) of the tree.
    """
    timeout_s: float = 5.0        # wall clock
    memory_mb: int = 512          # RLIMIT_AS of each process; the tree's resident total
    output_bytes: int = 8192      # kept per stream (first half and last half)
    cpu_s: float | None = None
    processes: int = 8            # tasks in the program's tree, itself included

    def __post_init__(self):
        for name in ("timeout_s", "memory_mb", "output_bytes", "cpu_s", "processes"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"sandbox limit {name} must be a positive number, got {value!r}")

    @property
    def cpu_limit(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.timeout_s


# ---------------------------------------------------------------------------------------------
# The parent <-> worker protocol: length-prefixed JSON (never pickle: a worker's reply is data).


def send_msg(f, obj) -> None:
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    f.write(_HEADER.pack(len(data)) + data)
    f.flush()


def _read_exact(f, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = f.read(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def read_msg(f):
    """Read one message written by send_msg; EOFError when the stream ends first, ValueError
    when it is not a well-formed message."""
    (n,) = _HEADER.unpack(_read_exact(f, _HEADER.size))
    if n > MAX_MESSAGE:
        raise ValueError(f"protocol message of {n} bytes")
    return json.loads(_read_exact(f, n).decode("utf-8"))


# ---------------------------------------------------------------------------------------------
# The value codec: what crosses between a program and its grader. encode() runs in the program's
# process (the program may have tampered with it: what it sends is still only JSON); decode() runs
# in the grader and builds fresh built-in objects, so no object of the program's ever reaches the
# tests. Anything else becomes an Opaque value, equal to nothing, unusable in a condition.


class Opaque:
    """A value the program returned that is not plain data (e.g. an object with its own __eq__)."""
    __slots__ = ("type_name",)

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    __hash__ = object.__hash__

    def __bool__(self):
        raise TypeError(f"the program returned a {self.type_name} object, not plain data")

    def __repr__(self):
        return f"<opaque {self.type_name}>"


_ITERATOR_TYPES = tuple(type(x) for x in (iter([]), iter(()), iter(""), iter(range(0)), iter({}), iter(set()),
                                         map(int, ()), filter(None, ()), zip(), enumerate(()), reversed([]),
                                         (lambda: (yield))()))
_VIEWS = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items"}


def encode(x, depth: int = 0):
    """A JSON-ready form of x. Scalars stay themselves (floats that JSON lacks are tagged); every
    other value is a tagged object {"$": kind, "v": ...}, so tuple, list, set and dict stay apart."""
    if depth > _MAX_DEPTH:
        return {"$": "opaque", "v": "nested too deep"}
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x
    if t is float:
        return x if math.isfinite(x) else {"$": "float", "v": repr(x)}
    d = depth + 1
    if t is list:
        return {"$": "list", "v": [encode(y, d) for y in x]}
    if t is tuple:
        return {"$": "tuple", "v": [encode(y, d) for y in x]}
    if t is dict:
        return {"$": "dict", "v": [[encode(k, d), encode(v, d)] for k, v in x.items()]}
    if t is set or t is frozenset:
        return {"$": t.__name__, "v": [encode(y, d) for y in x]}
    # Subclasses of the built-in types travel as their base value (a namedtuple as a tuple, a
    # defaultdict as a dict): the tests compare values, and the program's methods stay behind.
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return int.__index__(x)
    if isinstance(x, float):
        return encode(float.__float__(x), depth)
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, (bytes, bytearray)):
        return {"$": "bytes" if isinstance(x, bytes) else "bytearray", "v": bytes(x).hex()}
    if isinstance(x, complex):
        return {"$": "complex", "v": [encode(x.real, d), encode(x.imag, d)]}
    if isinstance(x, tuple):
        return {"$": "tuple", "v": [encode(y, d) for y in tuple.__iter__(x)]}
    if isinstance(x, list):
        return {"$": "list", "v": [encode(y, d) for y in list.__iter__(x)]}
    if isinstance(x, dict):
        return {"$": "dict", "v": [[encode(k, d), encode(v, d)] for k, v in dict.items(x)]}
    if isinstance(x, (set, frozenset)):
        return {"$": "frozenset" if isinstance(x, frozenset) else "set", "v": [encode(y, d) for y in x]}
    if t is range:
        return {"$": "range", "v": [x.start, x.stop, x.step]}
    if t in _VIEWS:
        return {"$": _VIEWS[t], "v": [encode(y, d) for y in x]}
    if isinstance(x, _ITERATOR_TYPES):
        items = []
        for y in x:
            if len(items) >= _MAX_ITEMS:
                return {"$": "opaque", "v": "endless iterator"}
            items.append(encode(y, d))
        return {"$": "iter", "v": items}
    mod = t.__module__ if isinstance(getattr(t, "__module__", None), str) else "?"
    if mod in ("fractions", "decimal") and t.__name__ in ("Fraction", "Decimal"):
        return {"$": t.__name__, "v": str(x)}
    return {"$": "opaque", "v": str(getattr(t, "__name__", "?"))[:100]}


class BadValue(ValueError):
    """An encoded value that does not follow the codec (a forged or corrupted message)."""


def decode(x, depth: int = 0):
    """The value encode() described, built from built-in types only; BadValue otherwise."""
    if depth > _MAX_DEPTH + 1:
        raise BadValue("nested too deep")
    if x is None or type(x) in (bool, int, float, str):
        return x
    if type(x) is not dict or set(x) != {"$", "v"} or type(x["$"]) is not str:
        raise BadValue(f"not an encoded value: {type(x).__name__}")
    kind, v, d = x["$"], x["v"], depth + 1

    def items():
        if type(v) is not list:
            raise BadValue(f"{kind}: expected a list")
        return [decode(y, d) for y in v]

    try:
        if kind in ("list", "tuple", "set", "frozenset", "iter", "keys", "values"):
            seq = items()
            if kind == "list":
                return seq
            if kind == "tuple":
                return tuple(seq)
            if kind == "set":
                return set(seq)
            if kind == "frozenset":
                return frozenset(seq)
            if kind == "iter":
                return iter(seq)
            if kind == "keys":
                return dict.fromkeys(seq).keys()
            return dict(enumerate(seq)).values()
        if kind in ("dict", "items"):
            if type(v) is not list or not all(type(p) is list and len(p) == 2 for p in v):
                raise BadValue(f"{kind}: expected [key, value] pairs")
            out = {decode(k, d): decode(y, d) for k, y in v}
            return out if kind == "dict" else out.items()
        if kind == "float" and v in ("nan", "inf", "-inf"):
            return float(v)
        if kind in ("bytes", "bytearray") and type(v) is str:
            b = bytes.fromhex(v)
            return b if kind == "bytes" else bytearray(b)
        if kind == "complex" and type(v) is list and len(v) == 2:
            re_, im = (decode(y, d) for y in v)
            if type(re_) is not float or type(im) is not float:
                raise BadValue("complex: expected two floats")
            return complex(re_, im)
        if kind == "range" and type(v) is list and len(v) == 3 and all(type(y) is int for y in v):
            return range(*v)
        if kind in ("Fraction", "Decimal") and type(v) is str and len(v) < 10_000:
            if kind == "Fraction":
                from fractions import Fraction
                return Fraction(v)
            from decimal import Decimal
            return Decimal(v)
        if kind == "opaque" and type(v) is str:
            return Opaque(v[:100])
    except BadValue:
        raise
    except (TypeError, ValueError, ArithmeticError) as e:  # unhashable set element, bad hex, ...
        raise BadValue(f"{kind}: {e}") from None
    raise BadValue(f"unknown kind {kind!r}")


# ---------------------------------------------------------------------------------------------
# The call channel between a grader (trusted tests) and a program: length-prefixed JSON.


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


def _remote_exception(name) -> type:
    """The exception class the grader raises for an exception the program raised: the built-in
    of that name, or a fresh Exception subclass carrying the name (never a BaseException)."""
    name = name if type(name) is str and name.isidentifier() and len(name) <= 100 else "ProgramError"
    known = getattr(builtins, name, None)
    if isinstance(known, type) and issubclass(known, Exception):
        return known
    return type(name, (Exception,), {"__module__": "__main__"})


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
            raise TypeError("an argument is nested too deeply to pass to the program") from None
        for a in enc_args + list(enc_kw.values()):
            if type(a) is dict and a.get("$") == "opaque":
                raise TypeError(f"cannot pass a {a['v']} to the program (not plain data)")
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
                new = decode(new)
                if type(a) is list and type(new) is list:
                    a[:] = new
                elif type(a) in (dict, set) and type(new) is type(a):
                    a.clear()
                    a.update(new)
        if "raise" in reply:
            err = reply["raise"]
            if type(err) is not list or len(err) != 2 or type(err[1]) is not str:
                raise BadValue("bad exception")
            return _remote_exception(err[0])(err[1][:2000]), None
        if "value" not in reply:
            raise BadValue("no value")
        return None, decode(reply["value"])


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


