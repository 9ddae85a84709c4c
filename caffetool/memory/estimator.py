"""Memory a Caffe net takes, from Caffe's allocation rules (no Caffe run: VGG-16 in milliseconds).

What is counted, as Caffe 1.0 allocates it while training (``--phase train``: the solver's TRAIN
net after a forward and backward pass, and its TEST net — which a solver with ``test_iter`` builds
from the same net — after a test pass; ``test_net=False`` leaves it out) or running inference
(``--phase test``):

* parameters: data; in training also their gradients (``ClearParamDiffs``) and the solver's history,
  one blob per parameter (SGD, Nesterov, AdaGrad, RMSProp) or two (AdaDelta, Adam), plus the
  scratch blobs the CPU updates use (``update_``, ``temp_``: :data:`SCRATCH`); parameters shared
  by name count once, and the TEST net takes the TRAIN net's weights by layer name;
* activations: one blob per top, in-place layers sharing their bottom's; Split tops share data but
  have their own gradients; Flatten, Reshape and the like share both; a gradient where Caffe takes
  one (:func:`_diff_keys`); Data tops point into the prefetch buffers (``data_param.prefetch``
  batches, 4 by default);
* per-layer buffers, from each layer type's memory rule in the layer catalogue (:mod:`caffetool.layers`),
  each only if the step that first touches it runs; an RNN's or LSTM's unrolled net, accounted like a net of its own;
* GPU mode: all of the above on the device, prefetch batches also in pinned host memory, each
  allocation in CUDA's 2 MiB pages (large ones in whole pages, small ones packed); with cuDNN, each
  layer as cuDNN's class allocates (a convolution without im2col columns, and its input's gradient
  only when it propagates; LRN without ``scale_``; Softmax without its scratch), cuDNN's workspace
  and handles: on caffetool's engine (patch 0006) one workspace for both nets, the largest single
  need of the calls that run (as the engine's log gives it, ``Options.cudnn_choices``, or modelled),
  capped by the limit, on a stock engine each layer's own handles and workspace
  (:mod:`caffetool.memory.device`);
* CPU mode: glibc's own rounding of each allocation (16-byte chunks, whole pages above 128 KiB) and
  Caffe's own objects per layer and blob (``OBJECT_BYTES``, measured), so the figure can be
  compared with what malloc reports.

On a GPU the figure is what the net adds to the card's memory over a process that holds only the
CUDA context and cuBLAS (:mod:`caffetool.memory.reserve`), at the end of the training step, when
everything is allocated: the solver's history is allocated last, by the first update.

A layer no rule models is estimated as far as possible and named: the total is then a lower bound
(``Estimate.lower_bound``). A net Caffe could not build is refused rather than estimated: Caffe's
``Blob::Reshape`` aborts on a blob of more than INT_MAX elements, so an activation or a parameter
past that limit is named with the largest batch that stays within it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from caffetool.choices import INT32_MAX, choose
from caffetool.engine import cudnn_settings
from caffetool.errors import ConfigError, NetError
from caffetool.memory import batches, device, netgraph, parallel
from caffetool.layers.allocation import Buffer, Shape, count

HISTORY = {"SGD": 1, "Nesterov": 1, "AdaGrad": 1, "RMSProp": 1, "AdaDelta": 2, "Adam": 2}
# The solver's scratch blobs per parameter (``update_``, ``temp_``), which only the CPU updates touch:
# src/caffe/solvers/*_solver.cpp — AdaDelta's CPU update writes both ``update_`` and ``temp_``, Adam's
# only ``temp_``, the others only ``update_``; every ``*_update_gpu`` kernel works in place on the
# history blobs and the gradient, so on a GPU the scratch blobs are never allocated.
SCRATCH = {"cpu": {"SGD": 0, "Nesterov": 1, "AdaGrad": 1, "RMSProp": 1, "AdaDelta": 2, "Adam": 1},
           "gpu": {"SGD": 0, "Nesterov": 0, "AdaGrad": 0, "RMSProp": 0, "AdaDelta": 0, "Adam": 0}}
# Caffe's own objects on the host, per layer instance (the Layer, its LayerParameter copy, vectors and
# names), per Blob object (the Blob, its two SyncedMemory heads and its shape array) beyond the
# bytes it holds, per top blob, and per learnable parameter (the parameter blob and the solver's
# history/update/temp blobs; in the TEST net, the blob later replaced by the TRAIN net's). Measured
# with malloc's count (``memory.measure``) as the slope over 100 layers of one kind on this engine:
# in-place ReLU 2,980 bytes per layer for both nets, ReLU with its own top 4,175, Pooling 5,531,
# InnerProduct 10,409, Scale in place 8,264, BatchNorm in place 17,300, Convolution 16,011 (which
# also keeps five small shape blobs: kernel, stride, pad, dilation, input shape). A Data layer reading
# LMDB holds about 43 KB more (the database environment, transaction and cursor, the prefetch
# thread's objects): 84,856 to 89,256 bytes for a TRAIN and a TEST Data layer, whatever the batch.
OBJECT_BYTES = {"layer": 1490, "top": 600, "blob": 480, "param_train": 1950, "param_test": 480, "Data": 43000}
EXTRA_BLOBS = {"Convolution": 5, "Deconvolution": 5, "Im2col": 4}
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
    cudnn_workspace_mb: float | None = None  # None: the limit in force (caffetool.engine.cudnn_settings)
    # (layer, cuDNN call) -> workspace bytes the engine logged for its choice (device.logged_needs, from
    # a run of the same net and batch); calls not in it are modelled
    cudnn_choices: Mapping[tuple[str, str], int] | None = field(default=None, repr=False)
    input_shape: Shape | None = None
    test_net: bool = True  # training: count the solver's TEST net (its activations; weights shared)
    # A solver's test nets, each with the ``state`` Caffe gives it (all live at once); None: the TEST
    # phase of the net itself, as a solver with ``net`` and one ``test_iter`` builds it.
    test_nets: tuple[Any, ...] | None = field(default=None, repr=False)
    # The engine: caffetool's tuned one (patch 0004: its CPU layers on ``threads`` OpenMP threads
    # convolve chunks of images with scratch per thread; patch 0006: one cuDNN handle and workspace
    # per device) or a stock one (``--stock``: BVLC's column buffer and cuDNN handles per layer).
    tuned: bool = True
    threads: int = 1

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
    allocator: int  # CPU: glibc's rounding and Caffe's objects; GPU: CUDA's pages
    allocations: list[int] = field(default_factory=list)
    params: int = 0
    macc: int = 0
    seconds: float = 0.0
    unmodelled: list[tuple[str, str, str]] = field(default_factory=list)  # (layer, type, what was assumed)
    not_counted: list[tuple[str, str]] = field(default_factory=list)  # (layer, what it holds that is not counted)

    @property
    def total(self) -> int:
        return sum(self.groups.values()) + self.allocator

    @property
    def lower_bound(self) -> bool:
        """True when some layer's memory is unknown: the total is then the least the net needs."""
        return bool(self.unmodelled or self.not_counted)


def _with_train_batch(net: Any, batch: int) -> Any:
    """A copy of ``net`` whose TRAIN data layers have ``batch``: the TEST net built from it keeps its
    own TEST-only layers' batch, and a layer of both phases (a deploy net's ``Input``) has ``batch``
    there too, as it has in the engine."""
    copy = type(net)()
    copy.CopyFrom(net)
    batches.set_batch(copy, batch)
    return copy


def _check(o: Options) -> None:
    for flag, value in (("--batch-size", o.batch), ("--test-batch-size", o.test_batch)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}")
    if o.iter_size < 1:
        raise ConfigError(f"--iter-size must be at least 1, got {o.iter_size}")


def estimate(net: Any, options: Options, text: str | None = None, source: str = "net") -> Estimate:
    """``net`` is a train/test (or deploy) caffe_pb2.NetParameter; in training, the TEST nets are
    ``options.test_nets``, or else ``net`` in the TEST phase."""
    start = time.perf_counter()
    _check(options)
    o = options
    float_size = 2 if o.dtype == "fp16" else 4
    training = o.phase == "train"
    main = netgraph.build(net, o.phase, o.input_shape, o.batch, text, source)
    _check_blob_sizes(main, source, "batch", "--batch-size")
    ledger = _Ledger(float_size)
    rows = _account(main, o, ledger, train_net=training, forward=True)
    test_rows: list[Row] = []
    unmodelled = [(name, kind, why) for name, kind, why in main.unmodelled]
    not_counted = list(main.not_counted)
    nodes = list(main.nodes)
    for tested in (o.test_nets if o.test_nets is not None else [net]) if training and o.test_net else []:
        own_text = text if tested is net else None
        if o.test_batch is None and o.batch is not None and tested is net:
            tested = _with_train_batch(net, o.batch)
        test = netgraph.build(tested, "test", o.input_shape, o.test_batch, own_text, source)
        _check_blob_sizes(test, source, "test batch", "the TEST Data layer's batch_size")
        trained = {node.name for node in main.nodes}
        test_rows += _account(test, o, ledger, train_net=False, forward=True, shared_params=trained)
        nodes += test.nodes
        unmodelled += [u for u in test.unmodelled if u[:2] not in {m[:2] for m in unmodelled}]
        not_counted += [n for n in test.not_counted if n not in not_counted]
    if o.mode == "gpu" and o.cudnn and o.tuned:
        in_train = [training] * len(rows) + [False] * len(test_rows)
        _book_shared_cudnn(list(zip(nodes, rows + test_rows, in_train)), o, ledger)
    groups = {
        "model": sum(r.param_bytes + r.grad_bytes + r.history_bytes for r in rows + test_rows),
        "feature maps": sum(r.data_bytes for r in rows + test_rows) + ledger.prefetch_device,
        "gradient maps": sum(r.diff_bytes for r in rows + test_rows),
        "workspace": sum(r.scratch_bytes for r in rows + test_rows),
    }
    allocator = ledger.allocator_overhead() if o.mode == "cpu" else device.page_rounding(ledger.sizes)
    return Estimate(o, rows, test_rows, groups, ledger.pinned, allocator, ledger.sizes,
                    netgraph.param_count(main), sum(r.macc for r in rows), time.perf_counter() - start,
                    unmodelled, not_counted)


def largest_buildable_batch(net: Any, options: Options, text: str | None = None) -> int:
    """The largest batch whose every activation stays within Caffe's INT_MAX elements per blob."""
    return _buildable(netgraph.build(net, options.phase, options.input_shape, 1, text))


def _buildable(g: netgraph.Graph) -> int:
    """Activations lead with the batch, so each allows INT_MAX // (its elements per sample)."""
    return min((BLOB_LIMIT // count(shape[1:]) for shape in g.shapes.values() if shape), default=BLOB_LIMIT)


def _check_blob_sizes(g: netgraph.Graph, source: str, what: str, flag: str) -> None:
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
    """Every allocation, so glibc's (CPU) or CUDA's (GPU) per-allocation rounding can be added up."""

    def __init__(self, float_size: int) -> None:
        self.float_size = float_size
        self.sizes: list[int] = []
        self.pinned = 0
        self.prefetch_device = 0
        self.objects = 0  # Caffe's bookkeeping on the host (OBJECT_BYTES)

    def take(self, elements: int, itemsize: int = 4) -> int:
        return self.take_bytes(elements * (self.float_size if itemsize > 0 else 4))

    def take_bytes(self, size: int) -> int:
        """One allocation of ``size`` bytes whatever ``--dtype`` (cuDNN's workspace)."""
        if size:
            self.sizes.append(size)
        return size

    def allocator_overhead(self) -> int:
        """glibc's rounding of every allocation, and Caffe's own objects."""
        extra = self.objects
        for size in self.sizes:
            if size + 8 >= MMAP_THRESHOLD:
                extra += -(-(size + 16) // PAGE) * PAGE - size
            else:
                extra += max(32, -(-(size + 8) // 16) * 16) - size
        return extra


def _runs(when: str, train_net: bool, backward: bool, gpu: bool, propagates: bool = False) -> bool:
    """Whether a buffer first touched at step ``when`` exists after set-up, a forward pass and,
    in the TRAIN net, a backward pass (``gpu-*``, ``cpu-*``: only that device's code touches it)."""
    device, _, step = when.rpartition("-")
    if device and device != ("gpu" if gpu else "cpu"):
        return False
    when = step
    return when in ("setup", "forward") or (when == "backward" and train_net and backward) or (
        when == "propagate" and train_net and backward and propagates)


def _account(g: netgraph.Graph, o: Options, ledger: _Ledger, train_net: bool, forward: bool,
             shared_params: bool | set[str] = False, backward_runs: bool = True) -> list[Row]:
    """One row per layer: the bytes Caffe allocates for it in this net (``shared_params``: the
    TEST net, whose layers take the TRAIN net's weights by name, ``Net::ShareTrainedLayersWith``)."""
    gpu = o.mode == "gpu"
    rows: list[Row] = []
    seen_data: set[str] = set()
    diffs = _diff_keys(g, train_net and backward_runs, gpu, o.cudnn)
    counted_diffs: set[str] = set()
    for node in g.nodes:
        top_shape = g.shapes[node.tops[0]] if node.tops else ()
        owned = [p for p, shared in zip(node.info.params, node.shared_params) if not shared]
        row = Row(node.name, node.type, top_shape, node.info.macc, sum(count(p) for p in owned))
        if not (shared_params is True or (isinstance(shared_params, set) and node.name in shared_params)):
            for p in owned:
                row.param_bytes += ledger.take(count(p))
                if train_net:
                    row.grad_bytes += ledger.take(count(p))
                    for _ in range(HISTORY[o.solver] + SCRATCH[o.mode][o.solver]):
                        row.history_bytes += ledger.take(count(p))
        if node.is_data:
            _account_source(node, g, gpu, ledger, row)
        ledger.objects += _objects(node, g, train_net, o)
        for blob in node.tops:
            key = g.data_key.get(blob, blob)
            if key in seen_data or ":" in key:
                continue
            seen_data.add(key)
            if forward:
                row.data_bytes += ledger.take(count(g.shapes[blob]))
        for blob in node.tops + node.bottoms:
            key = g.diff_key.get(blob, blob)
            if key in diffs and key not in counted_diffs:
                counted_diffs.add(key)
                row.diff_bytes += ledger.take(count(g.shapes[blob]))
        cudnn = _cudnn(node, o)
        for buf in _buffers(node, o, cudnn):
            if buf.param is not None and node.lr_mults[buf.param] == 0:
                continue
            if _runs(buf.when, train_net and backward_runs, node.need_backward, gpu, any(node.bottom_need)):
                row.scratch_bytes += ledger.take(buf.count, buf.itemsize)
        if cudnn and not o.tuned:
            handles, workspace = device.stock_bytes(node, o.cudnn_workspace_mb)
            row.scratch_bytes += handles + ledger.take_bytes(workspace)
        if node.inner is not None:
            for inner in _account(node.inner, o, ledger, train_net, forward, True, node.need_backward):
                row.data_bytes += inner.data_bytes
                row.diff_bytes += inner.diff_bytes
                row.scratch_bytes += inner.scratch_bytes
        rows.append(row)
    return rows


def _cudnn(node: netgraph.Node, o: Options) -> bool:
    """Whether Caffe's layer factory makes this layer a cuDNN class in this run."""
    return o.mode == "gpu" and o.cudnn and node.info.cudnn is not None


def _buffers(node: netgraph.Node, o: Options, cudnn: bool = False) -> list[Buffer]:
    """The layer's buffers in this engine: cuDNN's class keeps its own set; a convolution of the
    OpenMP engine, on the CPU, adds its threads' scratch and may leave ``col_buffer_`` to the GPU
    code (:mod:`caffetool.memory.parallel`)."""
    if cudnn:
        return [b for b in node.info.buffers if b.name not in node.info.cudnn_unused] + node.info.cudnn_buffers
    work = node.info.conv_work
    if not o.tuned or o.mode != "cpu" or work is None:
        return node.info.buffers
    extra, chunked = parallel.buffers(work, o.threads)
    kept = [b for b in node.info.buffers if not (chunked and b.name == "col_buffer")]
    return kept + [b for b in extra if b.count]


def _objects(node: netgraph.Node, g: netgraph.Graph, train_net: bool, o: Options) -> int:
    """Host bytes of Caffe's bookkeeping for one layer (``OBJECT_BYTES``)."""
    tops = len(set(node.tops) - set(node.bottoms))
    blobs = len(node.info.buffers) + EXTRA_BLOBS.get(node.type, 0)
    per_param = OBJECT_BYTES["param_train"] + OBJECT_BYTES["blob"] * (HISTORY[o.solver] - 1) if train_net \
        else OBJECT_BYTES["param_test"]
    return (OBJECT_BYTES["layer"] + OBJECT_BYTES.get(node.type, 0) + OBJECT_BYTES["top"] * tops
            + OBJECT_BYTES["blob"] * blobs + per_param * len(node.info.params))


def _account_source(node: netgraph.Node, g: netgraph.Graph, gpu: bool, ledger: _Ledger, row: Row) -> None:
    """A data layer's tops: prefetch batches (pinned host memory plus device copies on a GPU),
    tops filled at set-up (DummyData) or first read (Input), or the caller's arrays (MemoryData)."""
    for blob in node.tops:
        if node.prefetch:
            held = sum(ledger.take(count(g.shapes[blob])) for _ in range(node.prefetch))
            if gpu:
                ledger.pinned += held
                ledger.prefetch_device += held
            else:
                row.data_bytes += held


def _diff_keys(g: netgraph.Graph, backward: bool, gpu: bool, cudnn: bool = False) -> set[str]:
    """The gradient allocations Caffe makes: loss tops (``SetLossWeights`` at set-up), blobs a
    forward pass uses as scratch, and in backward every top of a layer that back-propagates and
    the bottoms it writes (``LayerInfo.bottom_diff``, or a cuDNN class's own policy; ``always``:
    the layer takes the gradient before it looks at ``propagate_down``)."""
    keys: set[str] = set()

    def add(blob: str) -> None:
        key = g.diff_key.get(blob, blob)
        if ":" not in key:
            keys.add(key)

    for blob in g.setup_diffs:
        add(blob)
    for node in g.nodes:
        for blob, weight in zip(node.tops, node.loss_weights):
            if weight:
                add(blob)
        for k in node.info.forward_diff + (node.info.gpu_forward_diff if gpu else ()):
            if k < len(node.bottoms):
                add(node.bottoms[k])
        if not (backward and node.need_backward):
            continue
        if not node.is_split or any(node.bottom_need):
            for blob in node.tops:
                add(blob)
        policy = node.info.bottom_diff
        if gpu and cudnn and node.info.cudnn is not None and node.info.cudnn_bottom_diff is not None:
            policy = node.info.cudnn_bottom_diff
        for k, blob in enumerate(node.bottoms):
            rule = policy if isinstance(policy, str) else (policy[k] if k < len(policy) else "propagate")
            if rule == "always" or (rule == "propagate" and node.bottom_need[k]):
                add(blob)
    return keys


def _book_shared_cudnn(layers: list[tuple[netgraph.Node, Row, bool]], o: Options, ledger: _Ledger) -> None:
    """caffetool's engine (patch 0006): one workspace for the thread, as large as the largest single
    need of the cuDNN convolution calls that run (the training and test nets run on the same
    thread, so they share it), booked on the layer that needs it, and what cuDNN's convolutions
    cost once (:data:`caffetool.memory.device.CUDNN_CONV_BYTES`); the handle itself costs nothing
    measurable."""
    limit = int((cudnn_settings.workspace_mb() if o.cudnn_workspace_mb is None else o.cudnn_workspace_mb) * 2**20)
    convolutions = [(node, row, train) for node, row, train in layers if node.info.cudnn in device.CUDNN_CONV]
    if not convolutions:
        return
    convolutions[0][1].scratch_bytes += device.CUDNN_CONV_BYTES
    index, size = device.shared_workspace([(node, train) for node, _, train in convolutions], limit, o.cudnn_choices)
    convolutions[index][1].scratch_bytes += ledger.take_bytes(size)


def per_sample(net: Any, options: Options, text: str | None = None, around: int = 3) -> tuple[int, int]:
    """(fixed, per-sample bytes): memory = fixed + batch x per-sample, the line through the batches
    ``around`` and the one below it (1 and 2 for a batch of 1; the batch above may be past what Caffe
    can build). Memory is not one line over every batch (the OpenMP engine
    convolves a batch of 1 image by image and larger ones in chunks whose scratch stops growing), so
    a line shown beside an estimate is the one through its batch, which it then agrees with. On a GPU
    the line leaves out CUDA's pages, a step function of the batch: less than 2 MiB per allocation."""
    from dataclasses import replace  # noqa: PLC0415

    def size(batch: int) -> int:
        e = estimate(net, replace(options, batch=batch), text)
        return e.total - e.allocator if options.mode == "gpu" else e.total

    first = max(1, around - 1)
    low, high = size(first), size(first + 1)
    return low - first * (high - low), high - low
