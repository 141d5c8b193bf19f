"""Cost per million samples from optional prices: device-hours plus measured energy.

A small TOML file (``--prices prices.toml``)::

    currency = "USD"
    kwh = 0.30                        # per kWh
    [device_hour]                     # per device and hour
    cpu = 0.40                        # the whole host, for CPU cases
    gpu = 2.50                        # per GPU, any model
    "NVIDIA H100 80GB HBM3" = 3.10    # per GPU of this model (wins over 'gpu')

cost/sample = price_per_device_hour x devices / 3600 / (samples/s) + kwh_price x (J/sample) / 3.6e6.
Virtual devices share one chip: they count as one device. Where energy was not measured, the cost
is device-hours only and says so; where a device kind has no price, there is no cost (never 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import UserError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass(frozen=True)
class Prices:
    """Price per device-hour by kind or GPU model, per kWh, and the currency."""

    device_hour: dict[str, float] = field(default_factory=dict)
    kwh: float | None = None
    currency: str = "USD"

    def hourly(self, device_kind: str, gpu_name: str | None) -> float | None:
        """Price of one device of this kind (or model) for an hour."""
        if gpu_name and gpu_name in self.device_hour:
            return self.device_hour[gpu_name]
        return self.device_hour.get(device_kind)


def load(path: str | Path) -> Prices:
    """Read a prices file; UserError (one line) on anything wrong with it."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise UserError(f"{p}: no such prices file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: not a TOML prices file ({e})") from None
    unknown = set(doc) - {"currency", "kwh", "device_hour"}
    if unknown:
        raise UserError(f"{p}: unknown keys {sorted(unknown)} (expected currency, kwh, [device_hour])")
    hours = doc.get("device_hour", {})
    if not isinstance(hours, dict) or not all(_price(v) for v in hours.values()):
        raise UserError(f"{p}: [device_hour] must map device kinds or GPU models to non-negative numbers")
    kwh = doc.get("kwh")
    if kwh is not None and not _price(kwh):
        raise UserError(f"{p}: kwh must be a non-negative number; got {kwh!r}")
    if not hours and kwh is None:
        raise UserError(f"{p}: no prices (give [device_hour] and/or kwh)")
    return Prices(
        {str(k): float(v) for k, v in hours.items()},
        None if kwh is None else float(kwh),
        str(doc.get("currency", "USD")),
    )


def _price(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


@dataclass(frozen=True)
class Cost:
    """Cost per million samples and what it includes."""

    per_million: float
    energy_included: bool


def per_million(
    prices: Prices,
    device_kind: str,
    devices: int,
    virtual: bool,
    samples_per_s: float | None,
    energy_j_per_sample: float | None,
    gpu_name: str | None = None,
) -> Cost | None:
    """Cost of a million samples of a case, or None if it cannot be priced."""
    hourly = prices.hourly(device_kind, gpu_name)
    if hourly is None or not samples_per_s or samples_per_s <= 0:
        return None
    n = 1 if virtual else max(1, int(devices))  # devices: every chip of the case, on every node
    per_sample = hourly * n / 3600.0 / samples_per_s
    energy = False
    if energy_j_per_sample is not None and not math.isnan(energy_j_per_sample) and prices.kwh is not None:
        per_sample += prices.kwh * float(energy_j_per_sample) / 3.6e6
        energy = True
    return Cost(per_sample * 1e6, energy)
