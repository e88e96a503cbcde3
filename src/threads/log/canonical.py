"""RFC 8785 (JCS) canonical JSON: the only spelling a log line may have.

``canonical(value)`` writes the one byte form of a JSON value: object keys in UTF-16 code unit
order, no whitespace, ECMAScript number formatting, minimal lowercase ``\\u`` escapes, raw UTF-8
for everything else. ``parse_strict`` reads a line the way admission needs it: strict UTF-8, no
duplicate keys, no NaN/Infinity, nesting at most 64, integers inside the safe range.
Invariant: for every value v that ``parse_strict`` accepts, ``parse_strict(canonical(v)) == v``.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import Any

from threads.errors import LogError

JsonValue = Any  # None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]

MAX_DEPTH = 64
MAX_LINE_BYTES = 1024 * 1024
MAX_SAFE_INT = 2**53 - 1

_ESCAPES = {
    '"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group(0)
    return _ESCAPES.get(ch) or f"\\u{ord(ch):04x}"


def _string(s: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, s) + '"'


def _number(n: float) -> str:
    """ECMAScript Number::toString for a finite double (RFC 8785 section 3.2.2.3)."""
    if not math.isfinite(n):
        raise ValueError("NaN and Infinity have no JSON form")
    if n == 0:
        return "0"
    sign = "-" if n < 0 else ""
    digits, exponent = _shortest_digits(abs(n))
    k = len(digits)
    point = exponent + k  # position of the decimal point relative to the digit string
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * (-point) + digits
    e = point - 1
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return sign + mantissa + "e" + ("+" if e >= 0 else "-") + str(abs(e))


def _shortest_digits(x: float) -> tuple[str, int]:
    """The shortest round-trip decimal digits of x and their exponent: x = digits * 10**exponent."""
    mantissa, _, exp = repr(x).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    exponent = (int(exp) if exp else 0) - len(frac)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    return stripped, exponent


def _write(value: JsonValue, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_number(value))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for key in sorted(value, key=_utf16_key):
            if not isinstance(key, str):
                raise TypeError(f"object keys must be strings, not {type(key).__name__}")
            if not first:
                out.append(",")
            first = False
            out.append(_string(key))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _plain(value: JsonValue) -> bool:
    """True when the C encoder writes ``value`` byte-identically to RFC 8785: its leaves are
    exactly ``str``, ``int``, ``bool`` or ``None`` (no float, whose ECMAScript formatting
    differs from ``repr``, and no subclass or other type an encoder might spell its own way),
    and no object key holds a character beyond U+FFFF (UTF-16 key order differs from code
    point order only there). Its string escaping (short escapes, lowercase ``\\u00xx`` for
    other controls, nothing else) and integer output already match. A value nested past the
    interpreter's recursion limit is not plain (``canonical`` hands it to the reference)."""
    try:
        return _plain_node(value)
    except RecursionError:
        return False


def _plain_node(value: JsonValue) -> bool:
    kind = type(value)
    if kind is dict:
        for key in value:
            if type(key) is not str or not (key.isascii() or max(key) <= "\uffff"):
                return False
        return _plain_items(value.values())
    if kind is list or kind is tuple:
        return _plain_items(value)
    return kind is str or kind is int or kind is bool or value is None


def _plain_items(items: Iterable[JsonValue]) -> bool:
    """Whether every item is plain: leaves (most of an event's nodes) judged here, one call
    per container."""
    for item in items:
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if not ((kind is dict or kind is list or kind is tuple) and _plain_node(item)):
            return False
    return True


def canonical_reference(value: JsonValue) -> bytes:
    """RFC 8785 written out rule by rule; ``canonical`` must always equal it."""
    out: list[str] = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def canonical(value: JsonValue) -> bytes:
    """The RFC 8785 bytes of ``value`` (UTF-8, no trailing newline)."""
    if _plain(value):
        try:
            return _fast_encode(value)
        except (TypeError, ValueError):  # an integer past 64 bits, a lone surrogate, ...
            return canonical_reference(value)  # the reference says precisely why, or writes it
    return canonical_reference(value)


def _standard_encoder() -> Callable[[JsonValue], bytes]:
    encoder = json.JSONEncoder(
        ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
    )

    def encode(value: JsonValue) -> bytes:
        text: str = encoder.encode(value)
        return text.encode("utf-8")

    return encode


def _fast_encoder() -> Callable[[JsonValue], bytes]:
    """orjson (the ``fast`` extra, ~10x quicker) when installed, else the standard library's C
    encoder. On a plain value both write RFC 8785: keys sorted by code point, the same escapes
    (``test_fast_writer_equals_the_reference`` holds either to the reference)."""
    try:
        import orjson
    except ImportError:
        return _standard_encoder()
    option = orjson.OPT_SORT_KEYS

    def encode(value: JsonValue) -> bytes:
        return orjson.dumps(value, option=option)

    return encode


_fast_encode = _fast_encoder()


def _compact_encoder() -> Callable[[object], bytes]:
    """Compact JSON with sorted keys, as UTF-8: orjson when installed (a few times quicker),
    else the standard library's C encoder. Not canonical (floats are spelled as each writer
    spells them; RFC 8785 is ``canonical``): for bytes of our own that only we read back."""
    standard = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))

    def encode_standard(value: object) -> bytes:
        return standard.encode(value).encode("utf-8")

    try:
        import orjson
    except ImportError:
        return encode_standard
    option = orjson.OPT_SORT_KEYS

    def encode(value: object) -> bytes:
        try:
            return orjson.dumps(value, option=option)
        except TypeError:  # an integer past 64 bits: the standard library writes it
            return encode_standard(value)

    return encode


compact_dumps = _compact_encoder()


def _fast_decoder() -> Callable[[bytes], JsonValue]:
    """orjson's parser when installed, else the standard library's. For a line without an
    integer literal past the safe range (``may_hold_unsafe_integer``) that is valid UTF-8 JSON
    they read the same value; orjson refuses some lines the standard one reads (NaN, ...), as
    a ``ValueError`` either way."""
    try:
        import orjson
    except ImportError:
        return json.loads
    loads: Callable[[bytes], JsonValue] = orjson.loads
    return loads


fast_loads = _fast_decoder()


def reject_constant(name: str) -> float:
    """``json.loads``'s ``parse_constant``: NaN, Infinity and -Infinity are not JSON."""
    raise ValueError(f"{name} is not JSON")


def no_duplicate_keys(pairs: list[tuple[str, JsonValue]]) -> dict[str, JsonValue]:
    """``json.loads``'s ``object_pairs_hook``: an object naming one key twice is refused."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate object key {key[:80]!r}")
            seen.add(key)
    return obj


_STRING_LITERAL = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(rb"[\[\]{}]")


def deeper_than(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects more than ``limit`` levels deep
    (read without parsing it: a parser recurses once per level)."""
    return raw.count(b"[") + raw.count(b"{") > limit and _nesting_depth(raw) > limit


def _nesting_depth(raw: bytes) -> int:
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING_LITERAL.sub(b"", raw)):
        if match.group(0) in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _parse_int(literal: str) -> int | float:
    """Integers beyond ±(2^53-1) are doubles on the wire (as every JSON reader in JavaScript
    sees them): read them as floats, so canonical(value) reproduces the literal only when the
    double is exact; anything else fails the byte-equality check."""
    value = int(literal)
    return value if abs(value) <= MAX_SAFE_INT else float(literal)


def parse_strict(raw: bytes, *, seq: int | None = None) -> JsonValue:
    """Parse one line under the admission rules; any violation is ``invalid_line`` at ``seq``."""
    if len(raw) > MAX_LINE_BYTES:
        raise LogError("invalid_line", f"line is {len(raw)} bytes; the limit is 1 MiB", seq=seq)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogError("invalid_line", f"line is not valid UTF-8 ({exc.reason})", seq=seq) from None
    if deeper_than(raw):
        raise LogError("invalid_line", f"nesting is deeper than {MAX_DEPTH} levels", seq=seq)
    try:
        value = json.loads(
            text, object_pairs_hook=no_duplicate_keys, parse_constant=reject_constant,
            parse_int=_parse_int,
        )
    except (ValueError, RecursionError) as exc:
        raise LogError("invalid_line", f"line is not strict JSON: {exc}", seq=seq) from None
    return value


# Digits to "1", the bytes that can end an integer literal (",", "}", "]", JSON whitespace) to
# "2", the bytes that open a level ("[", "{") to "3", every other byte to "0". An integer literal
# past the safe range has at least 16 digits (2^53 has 16), and in valid JSON it ends at one of
# those bytes or at the end of the text: a line without 16 ones followed by a two (or closing
# it) holds none. A run of digits that ends otherwise is part of a string (a hash, an id) or of
# a number with a fraction or an exponent, which every parser reads as a double. The threes
# count what ``deeper_than`` counts, so a writer's line is scanned once for both.
_DIGITS = bytes(
    0x31 if 0x30 <= b <= 0x39 else 0x32 if b in b",}] \t\n\r" else 0x33 if b in b"[{" else 0x30
    for b in range(256)
)
_SIXTEEN_DIGITS = b"1" * 16
_UNSAFE_END = _SIXTEEN_DIGITS + b"2"


def may_hold_unsafe_integer(raw: bytes) -> bool:
    """False when ``raw`` surely holds no integer literal past ±(2^53-1) (a fast byte scan)."""
    return _unsafe_in(raw.translate(_DIGITS))


def _unsafe_in(scanned: bytes) -> bool:
    return _UNSAFE_END in scanned or scanned.endswith(_SIXTEEN_DIGITS)


def lines_holding_digit_runs(lines: Sequence[bytes]) -> set[int]:
    """The indices of ``lines`` that ``may_hold_unsafe_integer`` is true for, from one scan
    per ``_SCAN_LINES`` lines (one C call per line costs more than the scan of a short line;
    one scan of a whole long branch costs more again: its two copies of every line are fresh
    pages the kernel must map)."""
    found: set[int] = set()
    for base in range(0, len(lines), _SCAN_LINES):
        part = lines[base : base + _SCAN_LINES]
        # "\n" (a "2") ends each line's last literal, and no run spans two lines
        scanned = b"\n".join((*part, b"")).translate(_DIGITS)
        at = scanned.find(_UNSAFE_END)
        if at == -1:
            continue
        ends = list(accumulate(len(line) + 1 for line in part))  # where each next line starts
        while at != -1:
            index = bisect_right(ends, at)
            found.add(base + index)
            at = scanned.find(_UNSAFE_END, ends[index])
    return found


_SCAN_LINES = 256  # ~130 KB of typical lines


def parse_stored(raw: bytes) -> JsonValue:
    """A line admitted earlier, read back as admission read it (integer literals past the
    safe range are doubles) without repeating its checks."""
    return json.loads(raw, parse_int=_parse_int)


def _written_int(literal: str) -> int | float:
    """``_parse_int`` plus the byte-equality check admission would make on this one token: a
    literal past ±(2^53-1) is a double, kept only when it is that double's canonical form."""
    value = _parse_int(literal)
    if isinstance(value, float) and _number(value) != literal:
        raise ValueError(f"integer {literal} is outside the safe range (±(2^53-1))")
    return value


def parse_written(raw: bytes, *, seq: int | None = None) -> JsonValue:
    """Parse a line ``canonical`` just wrote under the rules of ``parse_strict`` that its
    writer does not already guarantee: size, depth and safe integers (it is valid UTF-8 and
    has no duplicate keys by construction). Any violation is ``invalid_line`` at ``seq``."""
    if len(raw) > MAX_LINE_BYTES:
        raise LogError("invalid_line", f"line is {len(raw)} bytes; the limit is 1 MiB", seq=seq)
    scanned = raw.translate(_DIGITS)  # what deeper_than and may_hold_unsafe_integer scan
    if scanned.count(b"3") > MAX_DEPTH and _nesting_depth(raw) > MAX_DEPTH:
        raise LogError("invalid_line", f"nesting is deeper than {MAX_DEPTH} levels", seq=seq)
    try:
        if _unsafe_in(scanned):
            return json.loads(raw, parse_int=_written_int)
        return fast_loads(raw)
    except ValueError as exc:
        raise LogError("invalid_line", f"line is not strict JSON: {exc}", seq=seq) from None


def admit_canonical(raw: bytes, *, seq: int | None = None) -> JsonValue:
    """Parse ``raw`` strictly and require it to be byte-identical to its canonical form."""
    value = parse_strict(raw, seq=seq)
    try:
        again = canonical(value)
    except (ValueError, UnicodeEncodeError) as exc:
        raise LogError("invalid_line", f"line has no canonical form: {exc}", seq=seq) from None
    if again != raw:
        raise LogError(
            "invalid_line",
            "line is not in canonical (RFC 8785) form; it was rewritten after it was written",
            seq=seq,
        )
    return value
