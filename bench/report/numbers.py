"""Numbers for people: three significant digits, thousands separators, never scientific notation."""

from __future__ import annotations

import math


def human(v: object, digits: int = 3) -> str:
    """``43,100``, ``528``, ``1.09``, ``0.00123``; ``-`` where not measured (None, NaN).

    Rounded to ``digits`` significant digits; integers past ``digits`` digits are rounded too
    (``43,107`` -> ``43,100``): a benchmark's fourth digit is noise.
    """
    if v is None or isinstance(v, bool):
        return "-" if v is None else str(v)
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(v)
    if not math.isfinite(x):
        return "-" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if x == 0:
        return "0"
    exp = math.floor(math.log10(abs(x)))
    decimals = digits - 1 - exp
    x = round(x, decimals)
    if x != 0 and math.floor(math.log10(abs(x))) > exp:  # 999.7 -> 1,000: one digit fewer after the point
        decimals -= 1
    return f"{x:,.{max(0, decimals)}f}"


def p_value(p: float) -> str:
    """``0.042``, ``< 0.001``."""
    return "< 0.001" if p < 0.001 else f"{p:.2g}"
