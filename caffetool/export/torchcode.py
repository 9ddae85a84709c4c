"""The text of an exported ``model.py``: one ``nn.Module`` for the net, the few small modules Caffe's
layers need that PyTorch lacks, and ``load()``.

The file imports only ``torch``: a user reads it, edits it and trains on with it without caffetool.
Its small modules are written out here as data (:data:`HELPERS`), each only where a layer uses it.
Nothing the net names is pasted into the text as it is: its strings are written as Python literals
(the docstring escaped, so quotes or a backslash in a net's name stay text) and its numbers so that any
value reads back as itself (``float('inf')``, ``float('nan')``).
"""

from __future__ import annotations

import io
import textwrap
import tokenize
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
    "Normalize": '''
class Normalize(nn.Module):
    """The SSD fork's Normalize: each item (``across_spatial``) or each position's channels divided by
    their L2 norm, sqrt(eps + sum of squares), then scaled by one learned factor or one per channel."""

    def __init__(self, shape: tuple[int, ...], across_spatial: bool, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape))
        self.across_spatial, self.eps = across_spatial, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        axes = tuple(range(1, x.dim())) if self.across_spatial else (1,)
        return x / torch.sqrt((x * x).sum(axes, keepdim=True) + self.eps) * self.weight
''',
    "Permute": '''
class Permute(nn.Module):
    """The SSD fork's Permute: the axes in another order."""

    def __init__(self, order: tuple[int, ...]) -> None:
        super().__init__()
        self.order = order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(*self.order).contiguous()
''',
    "PriorBox": '''
class PriorBox(nn.Module):
    """The SSD fork's PriorBox: the default boxes, then their variances, (1, 2, boxes x 4). They depend
    only on the net's shapes, so they are a buffer, whatever the inputs."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("priors", torch.zeros(shape))

    def forward(self, *_: torch.Tensor) -> torch.Tensor:
        return self.priors
''',
    "DetectionOutput": '''
class DetectionOutput(nn.Module):
    """The SSD fork's DetectionOutput (detection_output_layer.cpp): the predicted boxes decoded against
    the priors; for each image and class but the background, the boxes scoring above ``threshold``,
    best first (equal scores in prior order), at most ``top_k`` of them, kept by greedy non-maximum
    suppression (a box whose overlap with a kept one exceeds the threshold is dropped; with ``eta`` < 1
    the threshold shrinks after each kept box while above 0.5); of each image's kept boxes the
    ``keep_top_k`` best remain. Rows [image, label, confidence, xmin, ymin, xmax, ymax], by image, label
    and confidence, shaped (1, 1, rows, 7); with none in the whole batch, [image, -1, ...] per image.
    Arithmetic in float32 as the C++ does it, so the same boxes are kept."""

    def __init__(self, num_classes: int, share_location: bool, background: int, code: str, variance_in_target: bool,
                 threshold: float, nms_threshold: float, top_k: int, keep_top_k: int, eta: float = 1.0) -> None:
        super().__init__()
        self.num_classes, self.share_location, self.background = num_classes, share_location, background
        self.code, self.variance_in_target, self.threshold = code, variance_in_target, threshold
        self.nms_threshold, self.top_k, self.keep_top_k, self.eta = nms_threshold, top_k, keep_top_k, eta

    def forward(self, loc: torch.Tensor, conf: torch.Tensor, priors: torch.Tensor) -> torch.Tensor:
        n, count = loc.shape[0], priors.shape[-1] // 4
        boxes = self.decoded(loc.reshape(n, count, -1, 4), priors.reshape(2, count, 1, 4))
        conf = conf.reshape(n, count, self.num_classes)
        rows = []
        for image in range(n):
            kept = []  # (confidence, label, box), by label then rank
            for label in range(self.num_classes):
                if label == self.background:
                    continue
                candidates = boxes[image, :, 0 if self.share_location else label]
                for index in self.suppressed(candidates, conf[image, :, label]):
                    kept.append((float(conf[image, index, label]), label, candidates[index]))
            if -1 < self.keep_top_k < len(kept):
                best = sorted(kept, key=lambda row: -row[0])[:self.keep_top_k]
                kept = sorted(best, key=lambda row: row[1])
            rows += [torch.cat([torch.tensor([image, label, score], dtype=loc.dtype), box])
                     for score, label, box in kept]
        if not rows:
            none = torch.full((n, 7), -1.0, dtype=loc.dtype)
            none[:, 0] = torch.arange(n, dtype=loc.dtype)
            return none.reshape(1, 1, n, 7)
        return torch.stack(rows).reshape(1, 1, -1, 7)

    def decoded(self, loc: torch.Tensor, priors: torch.Tensor) -> torch.Tensor:
        low, high = priors[0, ..., :2], priors[0, ..., 2:]
        move_low, move_high = loc[..., :2], loc[..., 2:]
        if not self.variance_in_target:
            move_low, move_high = priors[1, ..., :2] * move_low, priors[1, ..., 2:] * move_high
        if self.code == "CENTER_SIZE":
            size = high - low
            centre = move_low * size + (low + high) / 2
            half = torch.exp(move_high) * size / 2
            low, high = centre - half, centre + half
        elif self.code == "CORNER_SIZE":
            size = high - low
            low, high = low + move_low * size, high + move_high * size
        else:
            low, high = low + move_low, high + move_high
        return torch.cat([low, high], -1)

    def suppressed(self, boxes: torch.Tensor, scores: torch.Tensor) -> list[int]:
        """The indices that greedy suppression keeps, best first. With a fixed threshold, candidate i is kept
        if no kept candidate before it overlaps it past the threshold: one answer, which repeating that
        rule for all candidates at once reaches (each pass settles at least the next candidate)."""
        above = torch.nonzero(scores > self.threshold).flatten()
        order = torch.sort(scores[above], descending=True, stable=True).indices
        if self.top_k > -1:
            order = order[:self.top_k]
        chosen = above[order]
        overlaps = self.overlaps(boxes[chosen])
        if self.eta < 1:
            return chosen[self.adaptive(overlaps)].tolist()
        over = torch.tril(overlaps > self.nms_threshold, -1).to(boxes.dtype)
        keep = torch.ones(len(chosen), dtype=boxes.dtype)
        while True:
            settled = (over @ keep == 0).to(boxes.dtype)
            if torch.equal(settled, keep):
                return chosen[keep.bool()].tolist()
            keep = settled

    def adaptive(self, overlaps: torch.Tensor) -> list[int]:
        """Greedy suppression whose threshold shrinks by ``eta`` after each kept box while above 0.5 (in
        float32, as the C++), one candidate after another."""
        rows = overlaps.tolist()
        kept: list[int] = []
        threshold = self.nms_threshold
        for i, row in enumerate(rows):
            if all(row[k] <= threshold for k in kept):
                kept.append(i)
                if threshold > 0.5:
                    threshold = float(torch.tensor(threshold * self.eta, dtype=torch.float32))
        return kept

    @staticmethod
    def overlaps(b: torch.Tensor) -> torch.Tensor:
        """Intersection over union of every pair (bbox_util.hpp ``JaccardOverlap``): 0 where two boxes do not
        overlap; a box with its corners the wrong way round has no area."""
        width = torch.minimum(b[:, None, 2], b[None, :, 2]) - torch.maximum(b[:, None, 0], b[None, :, 0])
        height = torch.minimum(b[:, None, 3], b[None, :, 3]) - torch.maximum(b[:, None, 1], b[None, :, 1])
        inverted = (b[:, 2] < b[:, 0]) | (b[:, 3] < b[:, 1])
        area = torch.where(inverted, torch.zeros_like(b[:, 0]), (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))
        intersection = width * height
        iou = intersection / (area[:, None] + area[None, :] - intersection)
        return torch.where((width <= 0) | (height <= 0), torch.zeros_like(iou), iou)
''',
}
USES_FUNCTIONAL = {"WithinChannelLRN"}
MODULE_NAMES = {"annotations", "Path", "torch", "F", "nn", "load", "float"}  # what model.py's top level names
NOT_NUMBERS = {"inf": "float('inf')", "nan": "float('nan')"}  # Python's repr of a float that is no literal


def docstring(text: str) -> str:
    """``text`` as a triple-quoted literal that reads back as exactly ``text``: backslashes, quotes and
    characters that are not printable (but the newline) escaped."""
    escaped = "".join(ch if ch == "\n" or (ch.isprintable() and ch not in '\\"') else
                      "\\" + ch if ch in '\\"' else repr(ch)[1:-1] for ch in text)
    return f'"""{escaped}"""'


def numbers_as_literals(expression: str) -> str:
    """``expression`` (a constructor a translation wrote, floats by their repr) with each ``inf`` and
    ``nan`` written as a call that gives that value: a bare ``inf`` is no Python literal (a string
    that holds the word is a string token, and stays)."""
    lines = expression.splitlines(keepends=True)
    offsets = [sum(len(line) for line in lines[:k]) for k in range(len(lines) + 1)]
    out, at = [], 0
    for t in tokenize.generate_tokens(io.StringIO(expression).readline):
        if t.type == tokenize.NAME and t.string in NOT_NUMBERS:
            begin, end = offsets[t.start[0] - 1] + t.start[1], offsets[t.end[0] - 1] + t.end[1]
            out += [expression[at:begin], NOT_NUMBERS[t.string]]
            at = end
    return "".join([*out, expression[at:]])


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
    text = "\n".join([*([textwrap.fill(about, 100), ""] if about else []),
                      "One attribute per Caffe layer, named after it; forward runs them in the deploy net's order (an",
                      "in-place Caffe layer rebinds its blob's name). Call load() for the model with its weights, in "
                      "eval", "mode as Caffe's deploy net runs:", "",
                      f"    model = load()  # the weights in {weights_name}, beside this file",
                      f"    {', '.join(returns)} = model({', '.join(inputs)})", "",
                      f"Inputs: {shapes} (N: any batch).", ""])
    out = [docstring(text), "",
           "from __future__ import annotations", "", "from pathlib import Path", "", "import torch",
           *(["import torch.nn.functional as F"] if USES_FUNCTIONAL & set(uses) else []),
           "from torch import nn", "", "",
           f"class {class_name}(nn.Module):",
           "    def __init__(self) -> None:", "        super().__init__()"]
    for a in attributes:
        named = "" if a.name == a.layer else f"  # Caffe layer {a.layer!r}"
        out.append(f"        self.{a.name} = {numbers_as_literals(a.build)}{named}")
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
            f"    path = weights if weights is not None else Path(__file__).with_name({weights_name!r})",
            "    model.load_state_dict(torch.load(path, map_location=map_location, weights_only=True))",
            "    return model.eval()", ""]
    return "\n".join(out)
