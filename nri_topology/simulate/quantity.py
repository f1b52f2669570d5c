"""Kubernetes resource quantities ("500m", "1.5", "512Mi", "2G") as integers.

Workload files and machine descriptions are written the way people write pod specs, so they
use the same quantity syntax; everything inside the simulator works in milli-CPU and bytes.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

_QUANTITY = re.compile(
    r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?\s*([A-Za-z]*)\s*$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def _value(text: str | int | float) -> Decimal:
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        value = Decimal(text)
    elif isinstance(text, float):
        value = Decimal(repr(text))
    else:
        match = _QUANTITY.match(text)
        if match is None or match.group(3) not in _SUFFIXES:
            raise QuantityError(f"not a quantity: {text!r} (examples: 500m, 2, 1.5, 512Mi, 4G)")
        number, exponent, suffix = match.groups()
        try:
            value = Decimal(number) * _SUFFIXES[suffix]
        except InvalidOperation:
            raise QuantityError(f"not a quantity: {text!r}") from None
        if exponent is not None:
            value = value.scaleb(int(exponent))
    if value < 0:
        raise QuantityError(f"negative quantity: {text!r}")
    return value


def milli_cpu(text: str | int | float) -> int:
    """CPU quantity in milli-CPU, rounded up like the API server does ("1.0001" -> 1001)."""
    return int((_value(text) * 1000).to_integral_value(rounding=ROUND_CEILING))


def byte_count(text: str | int | float) -> int:
    """Memory quantity in bytes, rounded up to a whole byte."""
    return int(_value(text).to_integral_value(rounding=ROUND_CEILING))


def format_bytes(value: int) -> str:
    """Bytes as a short binary quantity for tables: 33149947904 -> "30.9Gi"."""
    for suffix, scale in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value >= scale:
            amount = value / scale
            return f"{amount:.0f}{suffix}" if amount == int(amount) else f"{amount:.1f}{suffix}"
    return str(value)


def format_milli(value: int) -> str:
    """Milli-CPU as the shortest quantity: 2000 -> "2", 1500 -> "1500m"."""
    return str(value // 1000) if value % 1000 == 0 else f"{value}m"
