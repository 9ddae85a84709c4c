"""Common GPUs and their memory, declared as data (one board; multi-GPU boards per GPU)."""

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


def lookup(name: str) -> int:
    key = name.strip().lower().replace("tesla ", "").replace("geforce ", "")
    for gpu, size in GPUS.items():
        if gpu.lower() == key:
            return size
    from caffetool.errors import ConfigError  # noqa: PLC0415

    raise ConfigError(f"unknown --gpu {name!r}; known: {', '.join(GPUS)} (or give --gpu-memory 12GiB)")


def parse_size(text: str) -> int:
    """'12GiB', '12 GB', '11264MiB', '8e9' → bytes (GB and GiB both taken as 1024-based, as cards are sold)."""
    import re  # noqa: PLC0415

    from caffetool.errors import ConfigError  # noqa: PLC0415

    match = re.fullmatch(r"\s*([\d.]+(?:e\d+)?)\s*([kmgt]i?b?|b)?\s*", text.lower())
    if not match:
        raise ConfigError(f"cannot read the size {text!r}; write it like 12GiB, 11264MiB or 400MB")
    scale = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}.get((match.group(2) or "b")[0], 1)
    return int(float(match.group(1)) * scale)
