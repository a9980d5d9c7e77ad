"""The value codec: what crosses between a program and its grader.

encode() runs in the program's process (the program may have tampered with it: what it sends is
still only JSON); decode() runs in the grader and builds fresh built-in objects, so no object of
the program's ever reaches the tests. Anything that is not plain data arrives as an Opaque value,
equal to nothing and unusable as a condition. decode() also bounds what a message can cost the
grader (see decode).

Standard library only, no automon imports (see limits.py)."""

from __future__ import annotations

import math

_MAX_DEPTH = 64                  # nesting of an encoded value
_MAX_ITEMS = 1_000_000           # elements drawn from an iterator the program returns
MAX_NODES = 1_000_000            # values in one decoded message
_MAX_SAME_HASH = 8               # distinct values of one message under one hash (-1 and -2 share one)


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


# Python refuses to write or read an int of more than 4,300 decimal digits (sys.int_max_str_digits: the
# conversion is quadratic); a correct solution may still return math.factorial(2000), or be called with
# 10**5000. Such an int crosses as hex, which converts in linear time: 13,000 bits is 3,914 digits.
_INT_JSON_BITS = 13_000


def _int(x: int):
    return x if x.bit_length() <= _INT_JSON_BITS else {"$": "int", "v": format(x, "x")}


def encode(x, depth: int = 0):
    """A JSON-ready form of x. Scalars stay themselves (floats that JSON lacks are tagged); every
    other value is a tagged object {"$": kind, "v": ...}, so tuple, list, set and dict stay apart."""
    if depth > _MAX_DEPTH:
        return {"$": "opaque", "v": "nested too deep"}
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return _int(x)
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
        return _int(int.__index__(x))
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


def decode(x):
    """The value encode() described, built from built-in types only; BadValue otherwise, and for
    a message that would cost the grader more than its size: over MAX_NODES values, or more than
    _MAX_SAME_HASH distinct values under one hash (n such values make a set or dict of them cost
    n^2 comparisons, in C code no signal interrupts: 50,000 integers k * (2**61 - 1) took 14 s)."""
    return _Decoder().value(x, 0)


class _Decoder:
    def __init__(self):
        self.nodes = 0
        self.by_hash: dict[int, list] = {}

    def value(self, x, depth: int):
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise BadValue(f"more than {MAX_NODES} values")
        if depth > _MAX_DEPTH + 1:
            raise BadValue("nested too deep")
        out = self._build(x, depth)
        self._note(out)
        return out

    def _note(self, v) -> None:
        """Count the distinct values seen under v's hash (each hash keys at most _MAX_SAME_HASH of
        them, so this stays linear whatever the program sent)."""
        try:
            h = hash(v)
        except TypeError:  # unhashable (list, dict, set, a tuple holding one): never a set element
            return
        seen = self.by_hash.setdefault(h, [])
        for u in seen:
            if u is v or (type(u) is type(v) and u == v):
                return
        if len(seen) >= _MAX_SAME_HASH:
            raise BadValue(f"more than {_MAX_SAME_HASH} distinct values share one hash")
        seen.append(v)

    def _build(self, x, depth: int):
        if x is None or type(x) in (bool, int, float, str):
            return x
        if type(x) is not dict or set(x) != {"$", "v"} or type(x["$"]) is not str:
            raise BadValue(f"not an encoded value: {type(x).__name__}")
        kind, v, d = x["$"], x["v"], depth + 1

        def items():
            if type(v) is not list:
                raise BadValue(f"{kind}: expected a list")
            return [self.value(y, d) for y in v]

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
                out = {self.value(k, d): self.value(y, d) for k, y in v}
                return out if kind == "dict" else out.items()
            if kind == "float" and v in ("nan", "inf", "-inf"):
                return float(v)
            if kind in ("bytes", "bytearray") and type(v) is str:
                b = bytes.fromhex(v)
                return b if kind == "bytes" else bytearray(b)
            if kind == "complex" and type(v) is list and len(v) == 2:
                re_, im = (self.value(y, d) for y in v)
                if type(re_) is not float or type(im) is not float:
                    raise BadValue("complex: expected two floats")
                return complex(re_, im)
            if kind == "range" and type(v) is list and len(v) == 3 and all(type(y) is int for y in v):
                r = range(*v)
                # a range is its values to the tests (set(r) builds them all, in C): they count
                self.nodes += len(r)
                if self.nodes > MAX_NODES:
                    raise BadValue(f"a range of more than {MAX_NODES} values")
                return r
            if kind == "int" and type(v) is str and 0 < len(v) <= 1 << 22 and v.lstrip("-").isalnum():
                return int(v, 16)
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
        except (TypeError, ValueError, ArithmeticError, OverflowError) as e:  # unhashable set element, bad hex, ...
            raise BadValue(f"{kind}: {e}") from None
        raise BadValue(f"unknown kind {kind!r}")
