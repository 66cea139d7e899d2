"""Grading outside the untrusted process: the tests run here, on plain data, never beside the code.

The untrusted process (:mod:`tasks.sandbox_child`) only answers calls: ``add(1, 2)`` in, an
encoded return value out. The tests (Python statements from the dataset, e.g.
``assert add(1, 2) == 3``) run in this process, each in a fresh namespace where every free name
that is not a builtin (never the candidate's, whatever it defines) nor a standard-library module
it does not define is a :class:`CandidateFunction`. Calling one asks
the sandbox and waits for the answer (one program answers them all, one at a time: any number
of calls, in any order, within its wall clock); a call the run ended before answering fails its
test. The values that come back
are rebuilt here as fresh ``int``/``str``/``list``/... objects, so nothing the code defines (an
``__eq__`` that is always true, a patched builtin, a forged line) takes part in a comparison, and
the expected values never enter the untrusted process.

The tests are dataset content and are trusted like the rest of the dataset; they do only cheap
work on returned values, the candidate's calls run in the sandbox under its limits.
"""

from __future__ import annotations

import ast
import builtins
import collections
import fractions
import importlib
import random
import sys
import types
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from tasks.sandbox_child import encode
from tasks.syntax import top_level_names

_MAX_DEPTH = 100
MAX_ELEMENTS = 100_000
"""Most values (containers included) one answer may hold; its line is also at most ``MAX_EVENT_BYTES``."""
MAX_SHARED_HASH = 16
"""Most distinct numbers or tuples in one returned value that may share a hash."""
HASH_WORK_PER_VALUE = 4
"""Values hashed again by the hash check of nested tuples, per value of the answer (:class:`_Hashes`)."""
ITERATION_ENDS = (StopIteration, StopAsyncIteration)
_TAGS = {"t": tuple, "s": set, "fs": frozenset}
_PAIRS_TAGS = {"od": collections.OrderedDict, "ct": collections.Counter}
MAX_FRACTION_BITS = 1 << 16
_HASH_MODULUS = sys.hash_info.modulus


class Unanswered(BaseException):
    """A call the sandbox did not answer: its run ended (BaseException: a test's ``except Exception`` cannot
    swallow it)."""


class RefusedValue(ValueError):
    """An answer refused as a whole (too large, nested too deeply, hashes chosen to collide, a malformed part): its
    message reaches the test's failure as it is."""


class CandidateError(Exception):
    """The candidate's function raised an exception whose type is not a builtin one."""


def decode(data: Any) -> Any:
    """Plain objects of this process from the sandbox's encoded value (``ValueError`` if malformed, or larger than
    :data:`MAX_ELEMENTS` values or nested deeper than 100).

    Refused too: a value holding more than :data:`MAX_SHARED_HASH` distinct numbers or tuples with one
    hash (chosen to collide, they would make a set or dict of them, built here or by a test, take
    quadratic time). Strings and bytes need no check: their hashes are salted per process; nor do ints whose hash
    is themselves (no two of those share one, but -1 and -2).
    """
    return _decode_counted(data, count_values(data))


def _decode_counted(data: Any, values: int) -> Any:
    """:func:`decode`, ``data``'s values counted already (:func:`count_values`)."""
    if values > MAX_ELEMENTS:
        raise ValueError(f"more than {MAX_ELEMENTS} values")
    return _decode(data, 0, _Hashes(values))


class _Hashes:
    """The distinct hashable values of one decoded value, by hash, and the work of hashing its tuples.

    A tuple's hash is not kept: hashing a tuple hashes everything inside it again, so a chain of 99 nested tuples
    around 24,000 fractions (whose hash is Python code) cost 1.1 s to check, level after level. The values the
    tuples hashed hold, summed over the tuples, may be at most :data:`HASH_WORK_PER_VALUE` times the answer's values
    (an honest pair of pairs takes 3), the tuple past it refused."""

    def __init__(self, values: int) -> None:
        self.by_hash: dict[int, list] = {}
        self.sizes: dict[int, int] = {}  # id of a tuple built here -> the values it holds, itself included
        self.work, self.budget = 0, HASH_WORK_PER_VALUE * values + 1000

    def tuple_of(self, items: list) -> tuple:
        built = tuple(items)
        size = 1 + sum(self.sizes.get(id(item), 1) for item in items)
        self.sizes[id(built)] = size
        self.work += size
        if self.work > self.budget:
            raise RefusedValue("tuples nested too deeply to check their hashes")
        return self.checked(built)

    def checked(self, value: Any) -> Any:
        """``value``, counted among the distinct hashable values of its hash (``ValueError`` past the limit)."""
        if value is None or isinstance(value, str):
            return value
        try:
            key = hash(value)
        except TypeError:  # a tuple holding a list
            return value
        same = self.by_hash.get(key)
        if same is None:
            self.by_hash[key] = [value]
        elif value not in same:
            same.append(value)
            if len(same) > MAX_SHARED_HASH:
                raise RefusedValue(f"more than {MAX_SHARED_HASH} distinct members share one hash")
        return value


def count_values(data: Any, limit: int = MAX_ELEMENTS) -> int:
    """How many values ``data`` holds, its containers included; the count stops past ``limit`` (an exact count up
    to it, more than it beyond)."""
    stack, count = [data], 1
    while stack and count <= limit:
        item = stack.pop()
        members = item if type(item) is list else item.values() if type(item) is dict else ()
        count += len(members)
        stack += [member for member in members if type(member) is list or type(member) is dict]
    return count


def _decode(data: Any, depth: int, seen: _Hashes) -> Any:
    kind = type(data)
    if kind is str or kind is bool or data is None:
        return data
    if kind is int:
        return data if -_HASH_MODULUS < data < _HASH_MODULUS else seen.checked(data)
    if kind is float:
        return seen.checked(data)
    if depth > _MAX_DEPTH:
        raise RefusedValue("nested too deeply")
    inner = depth + 1
    if kind is list:
        return [item if type(item) is str else _decode(item, inner, seen) for item in data]
    if kind is not dict or len(data) != 1:
        raise ValueError("not an encoded value")
    (tag, body), = data.items()
    try:
        if tag in _TAGS and type(body) is list:
            items = [_decode(item, inner, seen) for item in body]
            return seen.tuple_of(items) if tag == "t" else seen.checked(_TAGS[tag](items))
        if tag == "d" and type(body) is list:
            return {_decode(key, inner, seen): _decode(item, inner, seen) for key, item in body}
        if tag == "n" and type(body) is str:
            return seen.checked(int(body, 16))
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) is float for x in body):
            return seen.checked(complex(*body))
        if tag in _PAIRS_TAGS and type(body) is list:
            return _PAIRS_TAGS[tag]({_decode(key, inner, seen): _decode(item, inner, seen) for key, item in body})
        if tag == "dq" and type(body) is list:
            return collections.deque(_decode(item, inner, seen) for item in body)
        if tag == "dqm" and type(body) is list and len(body) == 2 and type(body[0]) is int and type(body[1]) is list:
            return collections.deque((_decode(item, inner, seen) for item in body[1]), maxlen=body[0])
        if tag == "ba" and type(body) is str:
            return bytearray.fromhex(body)
        if tag == "q" and type(body) is list and len(body) == 2:
            return seen.checked(_fraction(*(_decode(part, inner, seen) for part in body)))
    except RefusedValue:
        raise
    except (TypeError, ValueError, OverflowError) as error:  # an unhashable key, bad hex, a maxlen past ssize_t
        raise RefusedValue(f"malformed {tag!r} value: {error}") from None
    raise RefusedValue(f"unknown tag {tag!r}")


def _fraction(numerator: Any, denominator: Any) -> fractions.Fraction:
    """A ``Fraction`` of two ints of at most :data:`MAX_FRACTION_BITS` bits (reducing wider ones takes seconds)."""
    if type(numerator) is not int or type(denominator) is not int or denominator == 0:
        raise ValueError("a fraction of two ints, its denominator not zero")
    if max(numerator.bit_length(), denominator.bit_length()) > MAX_FRACTION_BITS:
        raise ValueError(f"a fraction's parts are at most {MAX_FRACTION_BITS} bits")
    return fractions.Fraction(numerator, denominator)


@dataclass
class CallOutcome:
    """What one call gave: an answer (its encoded form, read once by :meth:`answer`), or the exception it raised
    (type name and message)."""

    encoded: Any = None
    raised: tuple[str, str] | None = None
    value: Any = field(default=None, repr=False)
    """The answer read, until its first use takes it."""
    unused: bool = False
    values: int = 0
    """The values the answer holds (:func:`count_values`)."""

    @classmethod
    def answer(cls, encoded: Any, values: int) -> CallOutcome:
        """The outcome of a call that returned ``encoded``, holding ``values`` values (:func:`count_values`);
        ``ValueError`` when it is no readable value (:func:`decode`)."""
        return cls(encoded=encoded, value=_decode_counted(encoded, values), unused=True, values=values)

    def result(self) -> Any:
        """The value, fresh at each use (a test may change it: the one read first, then one decoded anew from the
        encoded form, cheaper than a deep copy), or the exception, as a builtin type when it is one
        (never :data:`ITERATION_ENDS`: raised inside ``map`` or a generator, it would end the test's loop early and
        ``all(map(f, ...))`` would hold for any ``f``)."""
        if self.raised is None:
            if self.unused:
                value, self.value, self.unused = self.value, None, False
                return value
            return _decode(self.encoded, 0, _Hashes(self.values))
        name, message = self.raised
        kind = getattr(builtins, name, None)
        if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, ITERATION_ENDS):
            try:
                error = kind(message)
            except TypeError:  # one whose constructor wants more than a message (UnicodeDecodeError)
                error = CandidateError(f"{name}: {message}")
            raise error
        raise CandidateError(f"{name}: {message}")


class Caller:
    """Asks the sandbox each call a test makes (``ask``: an encoded call in, its outcome or None out)."""

    def __init__(self, ask: Callable[[list], CallOutcome | None]) -> None:
        self.ask = ask

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        try:
            call = [name, encode(list(args)), encode(dict(kwargs))]
        except (TypeError, ValueError) as error:
            raise TypeError(f"{name}() can only be called with plain data here: {error}") from None
        outcome = self.ask(call)
        if outcome is None:
            raise Unanswered(name)
        return outcome.result()


class CandidateFunction:
    """Stands for the candidate's top-level ``name`` in the tests: a call is asked of the sandbox."""

    def __init__(self, name: str, caller: Caller) -> None:
        self.name, self.caller = name, caller

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.caller.call(self.name, args, kwargs)

    def __repr__(self) -> str:
        return f"<candidate {self.name}>"


def free_names(test: str) -> set[str]:
    """Names a test reads but never binds itself (an over-approximation is harmless: unused proxies)."""
    tree = ast.parse(test)
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound


def defined_names(source: str) -> set[str]:
    """Top-level functions, classes and variables of the candidate's source, from its syntax tree (never run; parsed
    within a bound on this process's CPU: :mod:`tasks.syntax`); none when it does not parse."""
    return set(top_level_names(source) or ())


def test_namespace(test: str, caller: Caller, candidate_names: set[str],
                   entry_points: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A fresh namespace for one test: the builtins are this process's own, whatever the candidate defines (a
    top-level ``set = ...`` changes nothing a test sees), except the ``entry_points`` the task names as the
    functions under test; a standard module it names is imported unless the candidate defines that name; every
    other free name is the candidate's and proxied. Its ``random`` (named or imported) is :func:`test_random`."""
    generator = test_random(test)

    def test_import(name: str, *args: Any, **kwargs: Any) -> Any:
        return generator if name == "random" else builtins.__import__(name, *args, **kwargs)

    namespace: dict[str, Any] = {"__name__": "__test__", "__builtins__": {**vars(builtins), "__import__": test_import}}
    for name in free_names(test) - (set(dir(builtins)) - entry_points):
        namespace[name] = CandidateFunction(name, caller) if _proxied(name, candidate_names) \
            else generator if name == "random" else importlib.import_module(name)
    return namespace


def test_random(test: str) -> types.ModuleType:
    """The ``random`` module a test sees: its functions draw from a generator of its own, seeded from the test's
    text, so a test that draws its inputs (HumanEval's) makes the same calls each time it is graded (and when a
    service's calls are planned, :mod:`tasks.sandbox_plan`), and the trainer's own ``random`` is left alone."""
    generator = random.Random(zlib.crc32(test.encode("utf-8", "surrogatepass")))
    module = types.ModuleType("random", random.__doc__)
    for name in random.__all__:
        value = getattr(random, name)  # the module's functions are its hidden generator's methods, by these names
        module.__dict__[name] = value if isinstance(value, type) else getattr(generator, name)
    return module


def proxied_names(test: str, candidate_names: set[str], entry_points: frozenset[str] = frozenset()) -> set[str]:
    """The free names of ``test`` that stand for the candidate's functions (:func:`test_namespace`)."""
    return {name for name in free_names(test) - (set(dir(builtins)) - entry_points) if _proxied(name, candidate_names)}


def _proxied(name: str, candidate_names: set[str]) -> bool:
    return name not in sys.stdlib_module_names or name in candidate_names


@dataclass(frozen=True)
class TestOutcome:
    """One test: passed, or failed with an error."""

    passed: bool
    error: str | None = None


def run_test(index: int, test: str, caller: Caller, candidate_names: set[str],
             entry_points: frozenset[str] = frozenset()) -> TestOutcome:
    """Execute one test statement, its calls asked of the sandbox."""
    try:
        exec(compile(test, f"<test {index}>", "exec"), test_namespace(test, caller, candidate_names, entry_points))
    except Unanswered:
        return TestOutcome(False, f"test {index}: a call was not answered (the run ended)")
    except Exception as error:  # noqa: BLE001 - a failing test is a result
        return TestOutcome(False, f"test {index}: {type(error).__name__}: {error}"[:300])
    return TestOutcome(True)
