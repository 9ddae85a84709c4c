"""What a PyTorch translation of the catalogue returns, and the few helpers every translation writes with.

A translation (a layer type's ``pytorch``, :mod:`caffetool.layers.entry`) gives a :class:`TorchLayer`:
the constructor ``model.py`` writes for the layer's attribute, how ``forward`` calls it, its entries of
the ``state_dict``, and the small modules of ``model.py`` itself it needs
(:mod:`caffetool.export.torchcode` holds their text).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from caffetool.layers.caffelayer import Layer

CALL = "{self}({args})"

@dataclass
class TorchLayer:
    build: str  # the constructor, as model.py writes it: "nn.Conv2d(1, 20, 5)"
    state: dict[str, np.ndarray] = field(default_factory=dict)  # state_dict entries under the attribute
    call: str = CALL  # how forward calls it: {self} the attribute, {args} the bottoms, {0}, {1} ... each
    helpers: tuple[str, ...] = ()  # model.py's own modules it uses


def sizes(values: tuple[int, ...]) -> str:
    """A per-axis setting as a constructor takes it: one number where the axes agree."""
    return str(values[0]) if len(set(values)) == 1 else str(tuple(values))


def kwargs(**given: object) -> str:
    return "".join(f", {k}={v}" for k, v in given.items() if v is not None)


def four_d(l: Layer, what: str) -> None:
    if len(l.bottom_shapes[0]) != 4:
        raise l.refuse(f"PyTorch's {what} takes (N, C, H, W) blobs; this one is {len(l.bottom_shapes[0])}-D",
                       to="PyTorch")


def unless(values: tuple[int, ...], default: int) -> str | None:
    return None if set(values) == {default} else sizes(values)


def hw(values: tuple[int, ...]) -> str:
    """Spatial sizes as a message shows them: ``28x28``."""
    return "x".join(map(str, values))


def plain(build: str) -> Callable[[Layer], TorchLayer]:
    """A layer that is one of PyTorch's modules without settings."""
    return lambda l: TorchLayer(build)
