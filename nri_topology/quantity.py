"""Kubernetes resource quantities ("500m", "1.5", "512Mi", "1e3") as exact numbers, and back.

Annotations, config files and simulator workloads all spell amounts the way pod specs do; the
plugin works in milli-CPU and bytes. One parser for all of them, following the API server's
grammar and rounding up as it does:

    quantity ::= sign? number (binary | decimal | exponent)?
    number   ::= digits | digits "." digits? | "." digits
    binary   ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimal  ::= n | u | m | k | M | G | T | P | E
    exponent ::= ("e" | "E") sign? digits

No spaces. "1E" is 10^18 and "1E3" is 1000, as there. Deliberate differences, so that what a
quantity may cost stays bounded: exponents beyond ±100 and texts longer than 64 characters are
refused (the API server takes them; no resource is that large).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache

_SUFFIXES: Mapping[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(
    r"([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)
QUANTITY_HELP = "a Kubernetes quantity such as 500m, 2, 1.5, 1e3, 512Mi or 1G"
# Far beyond any real amount (the API server keeps 18 significant digits), far below the 4300
# digits Python's int() refuses: what a quantity may cost stays bounded.
MAX_QUANTITY_CHARS = 64


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity."""


@lru_cache(maxsize=1024)
def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity ("1500m" → 3/2, "1Ki" → 1024, "1e3" → 1000)."""
    if isinstance(text, str) and len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(
            f"{text[:MAX_QUANTITY_CHARS]!r}…({len(text)} characters) is longer than "
            f"{MAX_QUANTITY_CHARS} characters"
        )
    m = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise QuantityError(f"{text!r} is not {QUANTITY_HELP}")
    sign, number, exponent, suffix = m.groups()
    value = Fraction(number)
    if exponent:
        exp = int(exponent[1:])
        if abs(exp) > 100:
            raise QuantityError(f"{text!r}: exponent out of range")
        value *= Fraction(10) ** exp
    else:
        value *= _SUFFIXES[suffix or ""]
    return -value if sign == "-" else value


def cpu_milli(value: str | int | float) -> int:
    """A CPU quantity in milli-CPU, rounded up as Kubernetes does; negative is an error."""
    q = parse_quantity(str(value))
    if q < 0:
        raise QuantityError(f"{value!r} is negative")
    return math.ceil(q * 1000)


def memory_bytes(value: str | int | float) -> int:
    """A memory quantity in bytes, rounded up as Kubernetes does; negative is an error."""
    q = parse_quantity(str(value))
    if q < 0:
        raise QuantityError(f"{value!r} is negative")
    return math.ceil(q)


def format_milli(milli: int) -> str:
    """Milli-CPU as the shortest quantity: 2000 → "2", 1500 → "1500m"."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_cores(milli: int) -> str:
    """Milli-CPU as an exact decimal number of CPUs: 50900 → "50.9", 52000 → "52"."""
    whole, frac = divmod(milli, 1000)
    return f"{whole}.{frac:03d}".rstrip("0") if frac else str(whole)


def format_bytes(value: int) -> str:
    """Bytes as a short binary quantity for people: 33149947904 → "30.9Gi", 512 → "512"."""
    for suffix, scale in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value >= scale:
            amount = value / scale
            return f"{amount:.0f}{suffix}" if amount == int(amount) else f"{amount:.1f}{suffix}"
    return str(value)
