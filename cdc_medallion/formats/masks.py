"""Hexadecimal column bitmasks (Qlik Replicate `changeMask` / `columnMask`).

The mask is a string of hex digits read little-endian by byte: the first two digits are byte 0
(bits 0-7), the next two byte 1 (bits 8-15), and so on; within a byte bit 0 is the lowest.
Bit i stands for the column with ordinal i + 1. An odd-length string is read as if it were
left-padded with one `0`, and says so, so that the caller can flag it.

>>> decode_mask("0B").ordinals
(1, 2, 4)
>>> decode_mask("0001").ordinals
(9,)
>>> decode_mask("1")
Mask(ordinals=(1,), odd_length=True)
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from functools import lru_cache

_HEX = frozenset(string.hexdigits)


class MaskError(ValueError):
    """The mask is not a string of hexadecimal digits: it cannot be decoded at all."""


@dataclass(frozen=True, slots=True)
class Mask:
    ordinals: tuple[int, ...]  # 1-based column ordinals whose bit is set, ascending
    odd_length: bool = False

    def beyond(self, count: int) -> tuple[int, ...]:
        """Set bits whose ordinal is greater than the number of columns."""
        return tuple(o for o in self.ordinals if o > count)


def decode_mask(text: str) -> Mask:
    """Decode a hex mask; raise MaskError when it is not hexadecimal."""
    if not isinstance(text, str):
        raise MaskError(f"expected a string of hex digits, got {type(text).__name__}")
    return _decode_text(text)


@lru_cache(maxsize=4096)  # a table's messages repeat a handful of masks
def _decode_text(text: str) -> Mask:
    bad = sorted({c for c in text if c not in _HEX})
    if bad:
        raise MaskError(f"{text!r} is not hexadecimal (bad characters {''.join(bad)!r})")
    odd = len(text) % 2 == 1
    digits = "0" + text if odd else text
    ordinals = []
    for index in range(len(digits) // 2):
        byte = int(digits[2 * index : 2 * index + 2], 16)
        ordinals.extend(index * 8 + bit + 1 for bit in range(8) if byte >> bit & 1)
    return Mask(tuple(ordinals), odd)
