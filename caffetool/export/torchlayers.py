"""Each Caffe layer type as one attribute of a PyTorch module, computing what BVLC Caffe 1.0's forward
pass computes.

One function per layer type, found in :data:`TRANSLATIONS`; the types the PyTorch export does not
cover are refused by name (the ONNX export covers more, :mod:`.onnxlayers`). A function receives the
layer (:class:`Layer`: its parameter, the shapes Caffe gave its blobs, its learned blobs) and
returns a :class:`TorchLayer`: the constructor written into ``model.py``, how ``forward`` calls it,
and the layer's entries of the ``state_dict``. Where PyTorch's module and Caffe differ, the
translation follows Caffe or refuses the layer:

- Pooling: PyTorch's ``ceil_mode`` rounds up and drops a last window that starts in the end padding,
  which is Caffe's rule when a pooling is padded (``pooling_layer.cpp``); its average divides by the
  window clipped to the padded input, as Caffe's. A window whose size PyTorch would give otherwise
  (an unpadded stride longer than the kernel, a pad over half the kernel) is refused.
- LRN within a channel, Scale, Bias, Eltwise, Concat, Slice, Reshape, Power, AbsVal: small modules
  written into ``model.py`` itself (:mod:`.torchcode`), so the file needs only ``torch``.
- BatchNorm: the stored sums divided by Caffe's scale factor into ``running_mean`` and
  ``running_var``, PyTorch's ``momentum`` Caffe's ``1 - moving_average_fraction``; its Scale stays
  a layer of its own, as in the deploy net.
- Dropout is ``nn.Dropout``, the identity in ``eval()`` as Caffe's at test time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from caffetool.export.caffelayer import Layer, axis_of
from caffetool.nets import geometry

MAX, AVE = 0, 1  # PoolingParameter.PoolMethod
ACROSS_CHANNELS = 0  # LRNParameter.NormRegion
CALL = "{self}({args})"


@dataclass
class TorchLayer:
    build: str  # the constructor, as model.py writes it: "nn.Conv2d(1, 20, 5)"
    state: dict[str, np.ndarray] = field(default_factory=dict)  # state_dict entries under the attribute
    call: str = CALL  # how forward calls it: {self} the attribute, {args} the bottoms, {0}, {1} ... each
    helpers: tuple[str, ...] = ()  # model.py's own modules it uses


def _sizes(values: tuple[int, ...]) -> str:
    """A per-axis setting as a constructor takes it: one number where the axes agree."""
    return str(values[0]) if len(set(values)) == 1 else str(tuple(values))


def _kwargs(**given: object) -> str:
    return "".join(f", {k}={v}" for k, v in given.items() if v is not None)


def _four_d(l: Layer, what: str) -> None:
    if len(l.bottom_shapes[0]) != 4:
        raise l.refuse(f"PyTorch's {what} takes (N, C, H, W) blobs; this one is {len(l.bottom_shapes[0])}-D",
                       to="PyTorch")


# --- convolutions, pooling, inner product ---------------------------------------------------------

def convolution(l: Layer) -> TorchLayer:
    return _conv(l, transposed=False)


def deconvolution(l: Layer) -> TorchLayer:
    """Caffe's weight is (input channels, output channels / group, kernel...), as ConvTranspose2d's."""
    return _conv(l, transposed=True)


def _conv(l: Layer, transposed: bool) -> TorchLayer:
    p = l.param.convolution_param
    _four_d(l, "ConvTranspose2d" if transposed else "Conv2d")
    if axis_of(p.axis, 4) != 1:
        raise l.refuse(f"its channel axis is {p.axis}; PyTorch's convolutions take channels on axis 1", to="PyTorch")
    w = geometry.conv_window(p, 2)
    size = l.bottom_shapes[0][2:]
    if transposed:
        theirs = tuple((n - 1) * s - 2 * q + geometry.extent(k, d) for n, k, s, q, d
                       in zip(size, w.kernel, w.stride, w.pad, w.dilation))
    else:
        theirs = tuple((n + 2 * q - geometry.extent(k, d)) // s + 1 for n, k, s, q, d
                       in zip(size, w.kernel, w.stride, w.pad, w.dilation))
    if theirs != tuple(l.top_shapes[0][2:]):
        raise l.refuse(f"Caffe makes its output {_hw(l.top_shapes[0][2:])}, PyTorch's would be {_hw(theirs)}",
                       to="PyTorch")
    channels = l.bottom_shapes[0][1]
    kind = "ConvTranspose2d" if transposed else "Conv2d"
    build = (f"nn.{kind}({channels}, {p.num_output}, {_sizes(w.kernel)}"
             + _kwargs(stride=_unless(w.stride, 1), padding=_unless(w.pad, 0), dilation=_unless(w.dilation, 1),
                       groups=p.group if p.group != 1 else None, bias=None if p.bias_term else False) + ")")
    state = {"weight": l.blobs[0]}
    if p.bias_term:
        state["bias"] = l.blobs[1].reshape(-1)
    return TorchLayer(build, state)


def _unless(values: tuple[int, ...], default: int) -> str | None:
    return None if set(values) == {default} else _sizes(values)


def _hw(sizes: tuple[int, ...]) -> str:
    return "x".join(map(str, sizes))


def torch_pooled(size: int, kernel: int, stride: int, pad: int, ceil: bool) -> int:
    """The output size of PyTorch's pooling (``pooling_output_shape`` in ATen)."""
    out = (size + 2 * pad - kernel + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def pooling(l: Layer) -> TorchLayer:
    p = l.param.pooling_param
    if p.pool not in (MAX, AVE):
        raise l.refuse("stochastic pooling at test time weights each window by its values; PyTorch has no such "
                       "module", to="PyTorch")
    _four_d(l, "pooling")
    if p.global_pooling:
        return TorchLayer(f"nn.Adaptive{'Max' if p.pool == MAX else 'Avg'}Pool2d(1)")
    size = l.bottom_shapes[0][2:]
    w = geometry.pool_window(p, size)
    ceil = geometry.rounds_up(p)
    if any(2 * q > k for q, k in zip(w.pad, w.kernel)):
        raise l.refuse(f"its pad {_sizes(w.pad)} is more than half its kernel {_sizes(w.kernel)}, which PyTorch's "
                       "pooling refuses", to="PyTorch")
    theirs = tuple(torch_pooled(n, k, s, q, ceil) for n, k, s, q in zip(size, w.kernel, w.stride, w.pad))
    if theirs != tuple(l.top_shapes[0][2:]):
        raise l.refuse(f"Caffe pools {_hw(size)} to {_hw(l.top_shapes[0][2:])}, PyTorch's pooling to {_hw(theirs)} "
                       "(a window starting past the input)", to="PyTorch")
    kind = "MaxPool2d" if p.pool == MAX else "AvgPool2d"
    return TorchLayer(f"nn.{kind}({_sizes(w.kernel)}" + _kwargs(stride=_sizes(w.stride), padding=_unless(w.pad, 0),
                                                                ceil_mode=True if ceil else None) + ")")


def inner_product(l: Layer) -> TorchLayer:
    """Caffe flattens the axes from ``axis`` on into one; ``transpose`` stores the weight as (in, out)."""
    p = l.param.inner_product_param
    rank = len(l.bottom_shapes[0])
    axis = axis_of(p.axis, rank)
    if axis == 0:
        raise l.refuse("it flattens the batch axis into its input (axis 0)", to="PyTorch")
    inputs = int(np.prod(l.bottom_shapes[0][axis:]))
    weight = l.blobs[0].reshape(-1, inputs) if not p.transpose else l.blobs[0].reshape(inputs, -1).T
    state = {"weight": np.ascontiguousarray(weight)}
    if p.bias_term:
        state["bias"] = l.blobs[1].reshape(-1)
    call = CALL if axis == rank - 1 else "{self}({0}.flatten(%d))" % axis
    return TorchLayer(f"nn.Linear({inputs}, {p.num_output}" + _kwargs(bias=None if p.bias_term else False) + ")",
                      state, call)


# --- activations ----------------------------------------------------------------------------------

def relu(l: Layer) -> TorchLayer:
    slope = float(l.param.relu_param.negative_slope)
    return TorchLayer("nn.ReLU()" if slope == 0 else f"nn.LeakyReLU({slope!r})")


def prelu(l: Layer) -> TorchLayer:
    if len(l.bottom_shapes[0]) < 2:
        raise l.refuse("it needs a channel axis", to="PyTorch")
    weight = l.blobs[0].reshape(-1)
    return TorchLayer(f"nn.PReLU({weight.size})" if weight.size > 1 else "nn.PReLU()", {"weight": weight})


def plain(build: str) -> Callable[[Layer], TorchLayer]:
    """A layer that is one of PyTorch's modules without settings."""
    return lambda l: TorchLayer(build)


def elu(l: Layer) -> TorchLayer:
    return TorchLayer(f"nn.ELU({float(l.param.elu_param.alpha)!r})")


def power(l: Layer) -> TorchLayer:
    p = l.param.power_param
    return TorchLayer(f"Power({float(p.power)!r}, {float(p.scale)!r}, {float(p.shift)!r})", helpers=("Power",))


def dropout(l: Layer) -> TorchLayer:
    return TorchLayer(f"nn.Dropout({float(l.param.dropout_param.dropout_ratio)!r})")


# --- normalisation --------------------------------------------------------------------------------

def lrn(l: Layer) -> TorchLayer:
    p = l.param.lrn_param
    _four_d(l, "LRN")
    if p.norm_region == ACROSS_CHANNELS:
        return TorchLayer(f"nn.LocalResponseNorm({p.local_size}, alpha={float(p.alpha)!r}, beta={float(p.beta)!r}, "
                          f"k={float(p.k)!r})")
    return TorchLayer(f"WithinChannelLRN({p.local_size}, alpha={float(p.alpha)!r}, beta={float(p.beta)!r})",
                      helpers=("WithinChannelLRN",))


def batch_norm(l: Layer) -> TorchLayer:
    """Caffe's stored mean and variance are sums scaled by the factor in its third blob."""
    p = l.param.batch_norm_param
    if p.HasField("use_global_stats") and not p.use_global_stats:
        raise l.refuse("use_global_stats is false, so Caffe normalises each batch by its own statistics at test "
                       "time; remove the field to use the stored ones", to="PyTorch")
    rank = len(l.bottom_shapes[0])
    if rank not in (2, 3, 4):
        raise l.refuse(f"PyTorch's BatchNorm takes 2-D to 4-D blobs; this one is {rank}-D", to="PyTorch")
    factor = float(l.blobs[2].reshape(-1)[0])
    factor = 0.0 if factor == 0 else 1.0 / factor
    mean = (l.blobs[0].reshape(-1) * np.float32(factor)).astype(np.float32)
    var = (l.blobs[1].reshape(-1) * np.float32(factor)).astype(np.float32)
    momentum = round(1.0 - float(p.moving_average_fraction), 12)
    kind = "BatchNorm2d" if rank == 4 else "BatchNorm1d"
    return TorchLayer(f"nn.{kind}({mean.size}, eps={float(p.eps)!r}, momentum={momentum!r}, affine=False)",
                      {"running_mean": mean, "running_var": var, "num_batches_tracked": np.array(0, np.int64)})


def _operand(l: Layer, axis: int, num_axes: int, blob: np.ndarray) -> np.ndarray:
    """A learned Scale/Bias blob shaped to broadcast against the bottom from ``axis`` on."""
    shape = l.bottom_shapes[0]
    covered = list(shape[axis:] if num_axes == -1 else shape[axis:axis + num_axes])
    return blob.reshape(covered + [1] * (len(shape) - axis - len(covered)))


def _trailing(l: Layer, axis: int) -> int:
    """How many axes of the first bottom follow those a second bottom covers from ``axis``."""
    return len(l.bottom_shapes[0]) - axis - len(l.bottom_shapes[1])


def scale(l: Layer) -> TorchLayer:
    p = l.param.scale_param
    axis = axis_of(p.axis, len(l.bottom_shapes[0]))
    if len(l.bottoms) == 2:
        if p.bias_term:
            raise l.refuse("its learned term is shaped as its second input, batch axis and all", to="PyTorch")
        return TorchLayer(f"ScaleByInput({_trailing(l, axis)})", helpers=("ScaleByInput",))
    if axis == 0:
        raise l.refuse("its factors cover the batch axis (axis 0)", to="PyTorch")
    weight = _operand(l, axis, p.num_axes, l.blobs[0])
    state = {"weight": weight}
    if p.bias_term:
        state["bias"] = _operand(l, axis, p.num_axes, l.blobs[1])
    return TorchLayer(f"Scale({tuple(weight.shape)}" + _kwargs(bias=True if p.bias_term else None) + ")", state,
                      helpers=("Scale",))


def bias(l: Layer) -> TorchLayer:
    p = l.param.bias_param
    axis = axis_of(p.axis, len(l.bottom_shapes[0]))
    if len(l.bottoms) == 2:
        return TorchLayer(f"BiasByInput({_trailing(l, axis)})", helpers=("BiasByInput",))
    if axis == 0:
        raise l.refuse("its terms cover the batch axis (axis 0)", to="PyTorch")
    operand = _operand(l, axis, p.num_axes, l.blobs[0])
    return TorchLayer(f"Bias({tuple(operand.shape)})", {"bias": operand}, helpers=("Bias",))


# --- several blobs --------------------------------------------------------------------------------

OPERATIONS = {0: "prod", 1: "sum", 2: "max"}  # EltwiseParameter.EltwiseOp


def eltwise(l: Layer) -> TorchLayer:
    p = l.param.eltwise_param
    coeffs = [float(c) for c in p.coeff]
    if coeffs and p.operation != 1:
        raise l.refuse("Caffe takes coefficients for SUM only", to="PyTorch")
    if coeffs and len(coeffs) != len(l.bottoms):
        raise l.refuse(f"{len(coeffs)} coefficients for {len(l.bottoms)} bottoms", to="PyTorch")
    settings = f", coeffs={tuple(coeffs)}" if coeffs and set(coeffs) != {1.0} else ""
    return TorchLayer(f"Eltwise({OPERATIONS[p.operation]!r}{settings})", helpers=("Eltwise",))


def concat(l: Layer) -> TorchLayer:
    p = l.param.concat_param
    axis = axis_of(p.concat_dim if p.HasField("concat_dim") else p.axis, len(l.bottom_shapes[0]))
    return TorchLayer(f"Concat({axis})", helpers=("Concat",))


def slice_(l: Layer) -> TorchLayer:
    p = l.param.slice_param
    axis = axis_of(p.slice_dim if p.HasField("slice_dim") else p.axis, len(l.bottom_shapes[0]))
    if axis == 0:
        raise l.refuse("it slices the batch axis (axis 0)", to="PyTorch")
    return TorchLayer(f"Slice({axis}, {tuple(s[axis] for s in l.top_shapes)})", helpers=("Slice",))


def split(l: Layer) -> TorchLayer:
    return TorchLayer(f"Split({len(l.tops)})", helpers=("Split",))


def flatten(l: Layer) -> TorchLayer:
    p = l.param.flatten_param
    rank = len(l.bottom_shapes[0])
    start, end = axis_of(p.axis, rank), axis_of(p.end_axis, rank)
    if start == 0:
        raise l.refuse("it flattens the batch axis (axis 0)", to="PyTorch")
    return TorchLayer(f"nn.Flatten({start}" + ("" if end == rank - 1 else f", {end}") + ")")


def reshape(l: Layer) -> TorchLayer:
    """Caffe's shape for one item; the batch axis passes through (a reshape of it is refused)."""
    if l.top_shapes[0][0] != l.bottom_shapes[0][0] or (l.param.reshape_param.axis == 0 and
                                                        list(l.param.reshape_param.shape.dim[:1]) != [0]):
        raise l.refuse("it reshapes the batch axis", to="PyTorch")
    return TorchLayer(f"Reshape({tuple(l.top_shapes[0][1:])})", helpers=("Reshape",))


def softmax(l: Layer) -> TorchLayer:
    return TorchLayer(f"nn.Softmax({axis_of(l.param.softmax_param.axis, len(l.bottom_shapes[0]))})")


TRANSLATIONS: dict[str, Callable[[Layer], TorchLayer]] = {
    "Convolution": convolution, "Deconvolution": deconvolution, "Pooling": pooling, "InnerProduct": inner_product,
    "ReLU": relu, "PReLU": prelu, "Sigmoid": plain("nn.Sigmoid()"), "TanH": plain("nn.Tanh()"), "ELU": elu,
    "BNLL": plain("nn.Softplus()"), "AbsVal": lambda l: TorchLayer("AbsVal()", helpers=("AbsVal",)),
    "Power": power, "Dropout": dropout, "LRN": lrn, "BatchNorm": batch_norm, "Scale": scale, "Bias": bias,
    "Eltwise": eltwise, "Concat": concat, "Slice": slice_, "Split": split, "Flatten": flatten, "Reshape": reshape,
    "Softmax": softmax,
}
