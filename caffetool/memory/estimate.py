"""Memory a Caffe net takes, from Caffe's allocation rules (no Caffe run: VGG-16 in milliseconds).

What is counted, as Caffe 1.0 allocates it while training (``--phase train``: the solver's TRAIN
net after a forward and backward pass, and its TEST net after a test pass) or running inference
(``--phase test``):

* parameters: data; in training also their gradients (``ClearParamDiffs``) and the solver's history,
  one blob per parameter (SGD, Nesterov, AdaGrad, RMSProp) or two (AdaDelta, Adam), plus the
  scratch blob all but SGD use (``update_``, ``temp_``); the TEST net's weights are shared;
* activations: one blob per top, in-place layers sharing their bottom's; Split tops share data but
  have their own gradients; a gradient only where a layer that back-propagates reads it;
  Data tops point into the prefetch buffers (``data_param.prefetch`` batches, 4 by default);
* per-layer scratch: im2col columns (one image; none for 1x1), bias multipliers, pooling argmax,
  dropout masks, LRN scales, softmax probabilities, BatchNorm temporaries — each only if the step
  that touches it runs;
* GPU mode: all of the above on the device, prefetch batches also in pinned host memory, and with
  cuDNN a workspace per convolution (the configured limit x group x 3 streams) instead of im2col;
* CPU mode: glibc's own rounding of each allocation (16-byte chunks, whole pages above 128 KiB),
  so the figure can be compared with what malloc reports.

A net Caffe could not build is refused rather than estimated: Caffe's ``Blob::Reshape`` aborts on a
blob of more than INT_MAX elements, so an activation or a parameter past that limit is named with
the largest batch that stays within it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from caffetool.choices import INT32_MAX, choose
from caffetool.errors import ConfigError, NetError
from caffetool.memory import graph as graphs
from caffetool.memory.layers import Shape, count

HISTORY = {"SGD": 1, "Nesterov": 1, "AdaGrad": 1, "RMSProp": 1, "AdaDelta": 2, "Adam": 2}
SCRATCH = {"SGD": 0, "Nesterov": 1, "AdaGrad": 1, "RMSProp": 1, "AdaDelta": 1, "Adam": 1}
CUDNN_STREAMS_PER_GROUP = 3
MMAP_THRESHOLD = 128 * 1024
PAGE = 4096
GROUPS = ("model", "feature maps", "gradient maps", "workspace")
PHASES, MODES, DTYPES = ("train", "test"), ("cpu", "gpu"), ("fp32", "fp16")
BLOB_LIMIT = INT32_MAX  # Blob::Reshape: CHECK_LE(count_, INT_MAX) << "blob size exceeds INT_MAX"


@dataclass
class Options:
    phase: str = "train"
    mode: str = "cpu"
    solver: str = "SGD"
    dtype: str = "fp32"
    batch: int | None = None
    test_batch: int | None = None
    iter_size: int = 1
    cudnn: bool = False
    cudnn_workspace_mb: float = 8.0
    input_shape: Shape | None = None
    test_net: bool = True  # training: count the solver's TEST net (its activations; weights shared)

    def __post_init__(self) -> None:
        """Names in their canonical spelling (``--type adam`` is Adam), so tables can be indexed by them."""
        self.phase = choose(self.phase, PHASES, "--phase")
        self.mode = choose(self.mode, MODES, "--mode")
        self.solver = choose(self.solver, HISTORY, "--type")
        self.dtype = choose(self.dtype, DTYPES, "--dtype")


@dataclass
class Row:
    layer: str
    type: str
    top: Shape
    macc: int
    params: int
    param_bytes: int = 0
    grad_bytes: int = 0
    history_bytes: int = 0
    data_bytes: int = 0
    diff_bytes: int = 0
    scratch_bytes: int = 0

    @property
    def total(self) -> int:
        return (self.param_bytes + self.grad_bytes + self.history_bytes + self.data_bytes
                + self.diff_bytes + self.scratch_bytes)


@dataclass
class Estimate:
    options: Options
    rows: list[Row]
    test_rows: list[Row]
    groups: dict[str, int]
    host_pinned: int
    allocator: int
    allocations: list[int] = field(default_factory=list)
    params: int = 0
    macc: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.groups.values()) + self.allocator


def _check(o: Options) -> None:
    for flag, value in (("--batch-size", o.batch), ("--test-batch-size", o.test_batch)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}")
    if o.iter_size < 1:
        raise ConfigError(f"--iter-size must be at least 1, got {o.iter_size}")


def estimate(net: Any, options: Options, text: str | None = None, source: str = "net") -> Estimate:
    """``net`` is a train/test (or deploy) caffe_pb2.NetParameter."""
    start = time.perf_counter()
    _check(options)
    o = options
    float_size = 2 if o.dtype == "fp16" else 4
    training = o.phase == "train"
    main = graphs.build(net, o.phase, o.input_shape, o.batch, text, source)
    _check_blob_sizes(main, source, "batch", "--batch-size")
    ledger = _Ledger(float_size)
    rows = _account(main, o, ledger, train_net=training, forward=True)
    test_rows: list[Row] = []
    if training and o.test_net and any(graphs.included(layer, 1) and layer.type == "Data" for layer in net.layer):
        test = graphs.build(net, "test", o.input_shape, o.test_batch, text, source)
        _check_blob_sizes(test, source, "test batch", "the TEST Data layer's batch_size")
        test_rows = _account(test, o, ledger, train_net=False, forward=True, shared_params=True)
    groups = {
        "model": sum(r.param_bytes + r.grad_bytes + r.history_bytes for r in rows),
        "feature maps": sum(r.data_bytes for r in rows + test_rows) + ledger.prefetch_device,
        "gradient maps": sum(r.diff_bytes for r in rows),
        "workspace": sum(r.scratch_bytes for r in rows + test_rows),
    }
    allocator = ledger.allocator_overhead() if o.mode == "cpu" else 0
    return Estimate(o, rows, test_rows, groups, ledger.pinned, allocator, ledger.sizes,
                    graphs.param_count(main), sum(r.macc for r in rows), time.perf_counter() - start)


def largest_buildable_batch(net: Any, options: Options, text: str | None = None) -> int:
    """The largest batch whose every activation stays within Caffe's INT_MAX elements per blob."""
    return _buildable(graphs.build(net, options.phase, options.input_shape, 1, text))


def _buildable(g: graphs.Graph) -> int:
    """Activations lead with the batch, so each allows INT_MAX // (its elements per sample)."""
    return min((BLOB_LIMIT // count(shape[1:]) for shape in g.shapes.values() if shape), default=BLOB_LIMIT)


def _check_blob_sizes(g: graphs.Graph, source: str, what: str, flag: str) -> None:
    """Refuse what Caffe's ``Blob::Reshape`` would abort on, naming the blob and a batch that fits."""
    for node in g.nodes:
        for shape in node.info.params:
            if count(shape) > BLOB_LIMIT:
                raise NetError(f"{source}: layer {node.name!r} has {_elements(shape)} weights in one blob, more "
                               f"than the {BLOB_LIMIT:,} (INT_MAX) Caffe allows, at any batch size")
    blob, shape = max(g.shapes.items(), key=lambda item: count(item[1]), default=("", ()))
    if count(shape) <= BLOB_LIMIT:
        return
    largest = _buildable(g)
    fix = (f"the largest {what} within that limit is {largest} ({flag} {largest})" if largest
           else f"no {what} is: one sample alone is past the limit")
    raise ConfigError(f"{source}: blob {blob.split('@')[0]!r} would hold {_elements(shape)} elements at {what} "
                      f"{shape[0]}, more than the {BLOB_LIMIT:,} (INT_MAX) a Caffe blob can hold; {fix}")


def _elements(shape: Shape) -> str:
    return f"{'x'.join(map(str, shape))} = {count(shape):,}"


class _Ledger:
    """Every allocation, so glibc's per-allocation rounding can be added up."""

    def __init__(self, float_size: int) -> None:
        self.float_size = float_size
        self.sizes: list[int] = []
        self.pinned = 0
        self.prefetch_device = 0

    def take(self, elements: int, itemsize: int = 4) -> int:
        size = elements * (self.float_size if itemsize > 0 else 4)
        if size:
            self.sizes.append(size)
        return size

    def allocator_overhead(self) -> int:
        extra = 0
        for size in self.sizes:
            if size + 8 >= MMAP_THRESHOLD:
                extra += -(-(size + 16) // PAGE) * PAGE - size
            else:
                extra += max(32, -(-(size + 8) // 16) * 16) - size
        return extra


def _account(g: graphs.Graph, o: Options, ledger: _Ledger, train_net: bool, forward: bool,
             shared_params: bool = False) -> list[Row]:
    gpu = o.mode == "gpu"
    rows: list[Row] = []
    seen_data: set[str] = set()
    diff_blobs = _diff_blobs(g) if train_net else set(g.loss_blobs)
    for node in g.nodes:
        top_shape = g.shapes[node.tops[0]] if node.tops else ()
        n_params = sum(count(p) for p in node.info.params)
        row = Row(node.name, node.type, top_shape, node.info.macc, n_params)
        if not shared_params:
            for p in node.info.params:
                row.param_bytes += ledger.take(count(p))
                if train_net:
                    row.grad_bytes += ledger.take(count(p))
                    for _ in range(HISTORY[o.solver] + SCRATCH[o.solver]):
                        row.history_bytes += ledger.take(count(p))
        if node.is_data:
            for blob in node.tops:
                batches = sum(ledger.take(count(g.shapes[blob])) for _ in range(node.prefetch))
                if node.prefetch and gpu:
                    ledger.pinned += batches
                    ledger.prefetch_device += batches
                elif node.prefetch:
                    row.data_bytes += batches
                elif forward:
                    row.data_bytes += ledger.take(count(g.shapes[blob]))
                seen_data.add(blob)
        for blob in node.tops:
            if blob in seen_data or node.is_data:
                continue
            seen_data.add(blob)
            if blob not in g.split_tops and forward:
                row.data_bytes += ledger.take(count(g.shapes[blob]))
        for blob in node.tops:
            if blob in diff_blobs:
                row.diff_bytes += ledger.take(count(g.shapes[blob]))
                diff_blobs.discard(blob)
        for blob in node.bottoms:  # an input's gradient, allocated only by a convolution's backward
            if blob in diff_blobs and node.type == "Convolution":
                row.diff_bytes += ledger.take(count(g.shapes[blob]))
                diff_blobs.discard(blob)
        for buf in node.info.buffers:
            runs = buf.when == "setup" or (buf.when == "forward" and forward) or \
                (buf.when == "backward" and train_net and node.need_backward)
            if buf.name == "im2col" and gpu and o.cudnn:
                continue
            if runs:
                row.scratch_bytes += ledger.take(buf.count, buf.itemsize)
        if gpu and o.cudnn and node.type == "Convolution":
            row.scratch_bytes += int(o.cudnn_workspace_mb * 2**20) * node.info.group * CUDNN_STREAMS_PER_GROUP
        rows.append(row)
    return rows


def _diff_blobs(g: graphs.Graph) -> set[str]:
    """Blobs whose gradient Caffe allocates: tops of back-propagating layers, loss tops, and the
    bottoms of back-propagating convolutions (``BaseConvolutionLayer::Backward_cpu`` takes
    ``bottom->mutable_cpu_diff()`` before it checks ``propagate_down``, so even the input's
    gradient is allocated)."""
    blobs = set(g.loss_blobs)
    for node in g.nodes:
        if node.need_backward:
            blobs.update(node.tops)
            if node.type == "Convolution":
                blobs.update(node.bottoms)
    return blobs


def per_sample(net: Any, options: Options, text: str | None = None) -> tuple[int, int]:
    """(fixed, per-sample bytes): memory = fixed + batch x per-sample, from two batch sizes."""
    from dataclasses import replace  # noqa: PLC0415

    one = estimate(net, replace(options, batch=1), text).total
    two = estimate(net, replace(options, batch=2), text).total
    return one - (two - one), two - one
