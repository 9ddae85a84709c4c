"""Which GPU architectures an engine's ELF files carry code for, read from their CUDA fat binaries.

nvcc puts a library's device code into its ``.nv_fatbin`` section: one or more fat binaries, each
a list of entries that are either machine code (a cubin) for one compute capability or PTX for one
virtual architecture. A card runs a library when some cubin's capability has the card's major
version and a minor version no higher than the card's (machine code runs on later minors of its own
major only), or when PTX for a capability no higher than the card's is there for the driver to
compile when the program starts. Reading the entries' headers answers that without a GPU and
without ``cuobjdump`` (which this machine's nvcc lacks); ``cuobjdump --list-elf --list-ptx`` on a
GPU machine lists the same entries.

The layout read here is the one nvcc has written since CUDA 4 (NVIDIA's ``fatbinary_section.h``
names the header fields: magic ``0xBA55ED50``, version, header size, fat size; each entry: kind,
version, header size, padded payload size, ..., compute capability at byte 28). Compressed
payloads (CUDA 12.8+ may compress) keep their headers readable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from caffetool.errors import BuildError

MAGIC = 0xBA55ED50
HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries that follow
ENTRY = struct.Struct("<HHII")  # kind, version, header size, padded payload size
CAPABILITY_AT = 28  # byte offset of the entry's compute capability (e.g. 90 for 9.0)
KINDS = {1: "ptx", 2: "cubin"}


@dataclass(frozen=True)
class Architectures:
    """The compute capabilities (as nvcc spells them: ``"90"`` for 9.0) of the cubins and the PTX."""

    cubins: tuple[str, ...]
    ptx: tuple[str, ...]

    def as_dict(self) -> dict[str, list[str]]:
        return {"sm": list(self.cubins), "ptx": list(self.ptx)}

    def runs_on(self, capability: tuple[int, int]) -> bool:
        """Whether a card of ``capability`` (major, minor) finds code it can run: a cubin of its
        major at or below its minor, or PTX at or below its capability (compiled at start)."""
        major, minor = capability
        cubin = any(c // 10 == major and c % 10 <= minor for c in map(int, self.cubins))
        return cubin or any(p <= major * 10 + minor for p in map(int, self.ptx))

    def jit_only(self, capability: tuple[int, int]) -> bool:
        """Runs on ``capability`` only through PTX compiled at every start (no cubin of its own)."""
        major, minor = capability
        return self.runs_on(capability) and not any(c // 10 == major and c % 10 <= minor for c in map(int, self.cubins))


def entries(blob: bytes) -> list[tuple[str, int]]:
    """``(kind, capability)`` of every entry of every fat binary in a ``.nv_fatbin`` section."""
    found = []
    offset = 0
    while offset + HEADER.size <= len(blob):
        magic, _, header_size, size = HEADER.unpack_from(blob, offset)
        if magic != MAGIC:
            break
        position, end = offset + header_size, offset + header_size + size
        while position + CAPABILITY_AT + 4 <= end:
            kind, _, entry_size, payload = ENTRY.unpack_from(blob, position)
            (capability,) = struct.unpack_from("<I", blob, position + CAPABILITY_AT)
            found.append((KINDS.get(kind, f"kind {kind}"), capability))
            position += entry_size + payload
        offset = (end + 7) // 8 * 8  # fat binaries start 8-byte aligned
    return found


def architectures(path: Path) -> Architectures:
    """The architectures ``path`` (a shared library or program) carries device code for; empty for
    a file without device code (a CPU engine)."""
    from elftools.common.exceptions import ELFError  # noqa: PLC0415  (bundles and checks only)
    from elftools.elf.elffile import ELFFile  # noqa: PLC0415

    try:
        with open(path, "rb") as f:
            section = ELFFile(f).get_section_by_name(".nv_fatbin")
            blob = section.data() if section is not None else b""
    except (OSError, ELFError) as e:
        raise BuildError(f"{path}: cannot read its device code ({e})") from None
    found = entries(blob)
    order = lambda caps: tuple(str(c) for c in sorted(caps))  # noqa: E731
    return Architectures(order({c for k, c in found if k == "cubin"}), order({c for k, c in found if k == "ptx"}))
