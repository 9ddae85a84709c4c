"""The text of an exported ``model.py``: one ``nn.Module`` for the net, the few small modules Caffe's
layers need that PyTorch lacks, and ``load()``.

The file imports only ``torch``: a user reads it, edits it and trains on with it without caffetool.
Its small modules are written out here as data (:data:`HELPERS`), each only where a layer uses it.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass



def _by_input(layer: str, operator: str, operand: str) -> str:
    """The module of Caffe's Scale or Bias by its second input: one text, two operations."""
    return f'''
class {layer}ByInput(nn.Module):
    """Caffe's {layer} by its second input, whose axes match the first's from the layer's axis on and
    broadcast over the ``trailing`` axes after them."""

    def __init__(self, trailing: int) -> None:
        super().__init__()
        self.trailing = trailing

    def forward(self, x: torch.Tensor, {operand}: torch.Tensor) -> torch.Tensor:
        return x {operator} {operand}.reshape(*{operand}.shape, *(1,) * self.trailing)
'''


HELPERS = {
    "WithinChannelLRN": '''
class WithinChannelLRN(nn.Module):
    """Caffe's LRN over a square within each channel: x * (1 + alpha * mean(x^2 over the square))^-beta,
    the square zero-padded at the edges and always divided by its full area."""

    def __init__(self, size: int, alpha: float, beta: float) -> None:
        super().__init__()
        self.size, self.alpha, self.beta = size, alpha, beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = F.avg_pool2d(x * x, self.size, stride=1, padding=(self.size - 1) // 2, count_include_pad=True)
        return x * (1 + self.alpha * mean) ** -self.beta
''',
    "Scale": '''
class Scale(nn.Module):
    """Caffe's Scale: a learned factor (and with ``bias`` a learned term) per position of the axes it
    covers, shaped to broadcast against the input."""

    def __init__(self, shape: tuple[int, ...], bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape))
        if bias:
            self.bias = nn.Parameter(torch.zeros(shape))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * self.weight
        return x if self.bias is None else x + self.bias
''',
    "Bias": '''
class Bias(nn.Module):
    """Caffe's Bias: a learned term per position of the axes it covers, shaped to broadcast."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias
''',
    "ScaleByInput": _by_input("Scale", "*", "factor"),
    "BiasByInput": _by_input("Bias", "+", "term"),
    "Eltwise": '''
class Eltwise(nn.Module):
    """Caffe's Eltwise: the product, the sum (each input times its coefficient) or the maximum of its
    inputs, taken in their order."""

    def __init__(self, operation: str, coeffs: tuple[float, ...] = ()) -> None:
        super().__init__()
        self.operation, self.coeffs = operation, coeffs

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if self.operation == "sum" and self.coeffs:
            xs = tuple(c * x for c, x in zip(self.coeffs, xs))
        out = xs[0]
        for x in xs[1:]:
            out = out * x if self.operation == "prod" else out + x if self.operation == "sum" else torch.maximum(out, x)
        return out
''',
    "Concat": '''
class Concat(nn.Module):
    """Caffe's Concat: its inputs joined along one axis."""

    def __init__(self, axis: int) -> None:
        super().__init__()
        self.axis = axis

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return torch.cat(xs, self.axis)
''',
    "Slice": '''
class Slice(nn.Module):
    """Caffe's Slice: its input cut along one axis into parts of the given sizes."""

    def __init__(self, axis: int, sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.axis, self.sizes = axis, sizes

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(x, list(self.sizes), self.axis)
''',
    "Split": '''
class Split(nn.Module):
    """Caffe's Split: its input, as several outputs."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x,) * self.count
''',
    "Reshape": '''
class Reshape(nn.Module):
    """Caffe's Reshape of each item to one shape (the batch axis passes through)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape)
''',
    "Power": '''
class Power(nn.Module):
    """Caffe's Power: (shift + scale * x) ** power."""

    def __init__(self, power: float, scale: float, shift: float) -> None:
        super().__init__()
        self.power, self.scale, self.shift = power, scale, shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.shift + self.scale * x) ** self.power
''',
    "AbsVal": '''
class AbsVal(nn.Module):
    """Caffe's AbsVal: |x|."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.abs()
''',
}
USES_FUNCTIONAL = {"WithinChannelLRN"}


@dataclass(frozen=True)
class Attribute:
    name: str  # the attribute
    layer: str  # the Caffe layer it is
    build: str  # its constructor


@dataclass(frozen=True)
class Step:
    tops: tuple[str, ...]  # variables it assigns
    call: str  # the expression


def source(class_name: str, about: str, attributes: list[Attribute], inputs: dict[str, str],
           steps: list[Step], returns: list[str], helpers: set[str], weights_name: str) -> str:
    """``model.py``: ``about`` (the docstring's first paragraph), the class, the helpers it uses and
    ``load``; ``inputs`` maps each ``forward`` argument to its shape, as the docstring says it."""
    uses = sorted(helpers, key=list(HELPERS).index)
    shapes = ", ".join(f"{name} {shape}" for name, shape in inputs.items())
    out = [f'"""{textwrap.fill(about, 100)}' if about else '"""', "",
           "One attribute per Caffe layer, named after it; forward runs them in the deploy net's order (an",
           "in-place Caffe layer rebinds its blob's name). Call load() for the model with its weights, in eval",
           "mode as Caffe's deploy net runs:", "",
           f"    model = load()  # the weights in {weights_name}, beside this file",
           f"    {', '.join(returns)} = model({', '.join(inputs)})", "",
           f"Inputs: {shapes} (N: any batch).", '"""', "",
           "from __future__ import annotations", "", "from pathlib import Path", "", "import torch",
           *(["import torch.nn.functional as F"] if USES_FUNCTIONAL & set(uses) else []),
           "from torch import nn", "", "",
           f"class {class_name}(nn.Module):",
           "    def __init__(self) -> None:", "        super().__init__()"]
    for a in attributes:
        named = "" if a.name == a.layer else f"  # Caffe layer {a.layer!r}"
        out.append(f"        self.{a.name} = {a.build}{named}")
    result = "torch.Tensor" if len(returns) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(returns))}]"
    out += ["", f"    def forward(self, {', '.join(f'{name}: torch.Tensor' for name in inputs)}) -> {result}:"]
    out += [f"        {', '.join(s.tops)} = {s.call}" for s in steps]
    out += [f"        return {', '.join(returns)}", ""]
    for name in uses:
        out.append(HELPERS[name].rstrip("\n"))
        out.append("")
    out += ["", f"def load(weights: str | Path | None = None, map_location: str = \"cpu\") -> {class_name}:",
            f'    """The model with its weights ({weights_name} beside this file unless given), in eval mode."""',
            f"    model = {class_name}()",
            f"    path = weights if weights is not None else Path(__file__).with_name(\"{weights_name}\")",
            "    model.load_state_dict(torch.load(path, map_location=map_location, weights_only=True))",
            "    return model.eval()", ""]
    return "\n".join(out)
