"""Common GPUs and their memory, declared as data (one board; multi-GPU boards per GPU), and card
sizes as people write them ("12GiB", "11264 MiB")."""

from __future__ import annotations

import re

from caffetool.choices import choose, number
from caffetool.errors import ConfigError

GIB = 1024**3

GPUS: dict[str, int] = {
    "GTX 980": 4 * GIB,
    "GTX 1080": 8 * GIB,
    "GTX 1080 Ti": 11 * GIB,
    "Titan X": 12 * GIB,
    "K40": 12 * GIB,
    "K80": 12 * GIB,  # each of its two GPUs
    "M40": 12 * GIB,
    "M40 24GB": 24 * GIB,
    "P100": 16 * GIB,
    "V100": 16 * GIB,
    "V100 32GB": 32 * GIB,
    "T4": 16 * GIB,
    "A100 40GB": 40 * GIB,
    "A100 80GB": 80 * GIB,
    "H100": 80 * GIB,
}
SIZE = re.compile(r"\s*(?P<number>[\d.e+]+)\s*(?P<unit>[kmgt]i?b?|b)?\s*", re.IGNORECASE)
UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
MAX_SIZE = 1024**5  # a petabyte: past any card, and within what the estimator's sums hold exactly


def lookup(name: str) -> int:
    """A card's memory by its name, in any case, with or without its "Tesla" or "GeForce" brand."""
    bare = re.sub(r"^\s*(tesla|geforce)\s+", "", name, flags=re.IGNORECASE)
    return GPUS[choose(bare, GPUS, "--gpu", also="or give --gpu-memory 12GiB")]


def parse_size(text: str, flag: str) -> int:
    """'12GiB', '12 GB', '11264MiB', '8e9' → bytes (GB and GiB both taken as 1024-based, as cards are sold)."""
    match = SIZE.fullmatch(text)
    if not match:
        raise ConfigError(f"{flag} {text!r} is not a size; write it like 12GiB, 11264MiB or 400MB")
    value = number(match["number"], flag, float, minimum=0)
    size = int(value * UNITS.get((match["unit"] or "b")[0].lower(), 1))
    if size > MAX_SIZE:
        raise ConfigError(f"{flag} {text!r} is past any GPU's memory; write it like 12GiB")
    return size
