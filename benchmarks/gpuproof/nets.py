"""The nets and solvers the GPU proof runs, built here with pycaffe (pure functions of NetParameters).

LeNet is caffetool's model with BVLC's published solver (``examples/mnist/lenet_solver.prototxt``);
the timed nets are caffetool's CaffeNet, VGG-16 and GoogLeNet models and the ResNet-50 of
``benchmarks/memory_nets.py`` at full size, each fed by DummyData as ``caffe time`` needs; the
memory nets keep Data layers (fed from small random LMDBs made on the GPU machine) so that the
prefetch threads are measured too; the calibration nets are tiny chains that isolate one fixed
cost each (the context, a cuRAND generator, a cuDNN handle, a Data layer, a convolution).
"""

from __future__ import annotations

from typing import Any

DATA = "@DATA@"  # replaced on the GPU machine by the folder holding the LMDBs
TRAIN, TEST = 0, 1
CAFFE_ENGINE = 1  # ConvolutionParameter.CAFFE (and the same value in every engine enum)

# (name, batch) for `caffe time`: the four nets and batches.
# LeNet too: where its training time goes per layer and pass.
TIME_NETS: tuple[tuple[str, int], ...] = (("caffenet", 256), ("vgg16", 64), ("googlenet", 32), ("resnet50", 32),
                                          ("lenet", 64))
TIME_ITERATIONS = {"lenet": 200}  # passes of `caffe time` (20 elsewhere): LeNet's take tens of microseconds
# (name, batch) for device memory against memory.estimate --mode gpu.
MEMORY_NETS: tuple[tuple[str, int], ...] = (("lenet", 64), ("caffenet", 32), ("vgg16", 16), ("googlenet", 16),
                                            ("resnet50", 16))
ENGINE_FIELDS = {
    "convolution_param": ("Convolution", "Deconvolution"), "pooling_param": ("Pooling",),
    "relu_param": ("ReLU",), "sigmoid_param": ("Sigmoid",), "tanh_param": ("TanH",),
    "softmax_param": ("Softmax", "SoftmaxWithLoss"), "lrn_param": ("LRN",),
}


def train_net(caffe: Any, name: str, batch: int) -> tuple[Any, tuple[int, int, int], int]:
    """The TRAIN/TEST net of ``name`` with Data layers reading ``@DATA@/memory_<name>``, its input
    shape and class count: caffetool's model, or ResNet-50 at 224x224 from memory_nets."""
    pb = caffe.proto.caffe_pb2
    if name == "resnet50":
        import memory_nets  # noqa: PLC0415  (benchmarks/ is on the path of the scripts here)

        net = with_data_layers(pb, memory_nets.resnet50(caffe, batch, size=224, classes=1000), batch)
        shape, classes = (3, 224, 224), 1000
    else:
        from caffetool.memory import netsource  # noqa: PLC0415

        source = netsource.load(caffe, name, None, batch=batch, test_batch=batch)
        net, shape, classes = source.net, source.input_shape, source.num_classes
    for layer in net.layer:
        if layer.type == "Data":
            layer.data_param.source = f"{DATA}/memory_{name}"
    return net, shape, classes


def with_data_layers(pb: Any, net: Any, batch: int) -> Any:
    """``net`` with its DummyData layer replaced by a TRAIN and a TEST Data layer (same tops)."""
    out = pb.NetParameter(name=net.name)
    for layer in net.layer:
        if layer.type != "DummyData":
            out.layer.add().CopyFrom(layer)
            continue
        for phase in (TRAIN, TEST):
            data = out.layer.add(name=layer.name, type="Data", top=list(layer.top))
            data.include.add(phase=phase)
            data.data_param.batch_size = batch
            data.data_param.backend = pb.DataParameter.LMDB
    return out


def lenet(caffe: Any) -> Any:
    """caffetool's LeNet (BVLC's ``lenet_train_test.prototxt``) reading ``@DATA@/{train,test}_lmdb``."""
    from caffetool.memory import netsource  # noqa: PLC0415

    pb = caffe.proto.caffe_pb2
    net = netsource.load(caffe, "lenet", None, batch=64, test_batch=100).net
    for layer in net.layer:
        if layer.type == "Data":
            split = "train" if layer.include[0].phase == pb.TRAIN else "test"
            layer.data_param.source = f"{DATA}/{split}_lmdb"
    return net


def lenet_solver(pb: Any, net: str, max_iter: int = 10000, seed: int | None = None,
                 test_interval: int = 500, snapshot_prefix: str | None = None, test_initialization: bool = True) -> str:
    """BVLC's ``examples/mnist/lenet_solver.prototxt`` on the GPU; a seed and a final snapshot
    where a run is compared with another."""
    s = pb.SolverParameter(net=net, test_interval=test_interval, base_lr=0.01, momentum=0.9,
                           test_initialization=test_initialization,
                           weight_decay=0.0005, lr_policy="inv", gamma=0.0001, power=0.75, display=100,
                           max_iter=max_iter, snapshot_after_train=snapshot_prefix is not None,
                           solver_mode=pb.SolverParameter.GPU)
    s.test_iter.append(100)
    if seed is not None:
        s.random_seed = seed
    if snapshot_prefix is not None:
        s.snapshot_prefix = snapshot_prefix
    return str(s)


def lenet_variants(pb: Any, lenet: Any) -> dict[str, Any]:
    """LeNet with one part changed each: ``all_cudnn`` (as published), ``conv_cudnn`` (only the
    convolutions on cuDNN), ``no_cudnn`` (Caffe's kernels), ``no_data`` (an Input layer instead of
    the Data layers: no prefetch thread, zeros in)."""
    conv_only = set_engine(copy(pb, lenet), CAFFE_ENGINE)
    for layer in conv_only.layer:
        if layer.type == "Convolution":
            layer.convolution_param.engine = 0  # DEFAULT: cuDNN in a cuDNN build
    no_data = pb.NetParameter(name=lenet.name)
    fed = no_data.layer.add(name="data", type="Input", top=["data", "label"])
    fed.input_param.shape.add(dim=[64, 1, 28, 28])
    fed.input_param.shape.add(dim=[64])
    for layer in lenet.layer:
        if layer.type != "Data":
            no_data.layer.add().CopyFrom(layer)
    return {"all_cudnn": copy(pb, lenet), "conv_cudnn": conv_only,
            "no_cudnn": set_engine(copy(pb, lenet), CAFFE_ENGINE), "no_data": no_data}


def set_engine(net: Any, engine: int) -> Any:
    """Every layer that has a cuDNN implementation put on ``engine`` (CAFFE: cuDNN off); returns ``net``."""
    for layer in net.layer:
        for field, types in ENGINE_FIELDS.items():
            if layer.type in types:
                getattr(layer, field).engine = engine
    return net


def copy(pb: Any, net: Any) -> Any:
    out = pb.NetParameter()
    out.CopyFrom(net)
    return out


def timed(pb: Any, net: Any, batch: int, shape: tuple[int, int, int], classes: int) -> Any:
    """The TRAIN net with its data layer replaced by Gaussian DummyData (``caffe time`` input)."""
    out = pb.NetParameter(name=net.name)
    layer = out.layer.add(name="data", type="DummyData", top=["data", "label"])
    p = layer.dummy_data_param
    p.shape.add(dim=[batch, *shape])
    p.shape.add(dim=[batch])
    p.data_filler.add(type="gaussian", std=1.0)
    p.data_filler.add(type="uniform", min=0, max=classes - 1)
    for original in net.layer:
        if original.type in ("Data", "DummyData") or any(rule.phase == TEST for rule in original.include):
            continue
        out.layer.add().CopyFrom(original)
    return out


# ---- calibration: tiny nets, each adding one fixed cost to the baseline ---------------------

def _dummy(batch: int = 1, channels: int = 2, size: int = 1) -> str:
    return ('layer { name: "d" type: "DummyData" top: "c0" top: "l" dummy_data_param { shape { '
            f'dim: {batch} dim: {channels} dim: {size} dim: {size} }} shape {{ dim: {batch} }} '
            'data_filler { type: "gaussian" } } } ')


def _head(bottom: str) -> str:
    return (f'layer {{ name: "ip" type: "InnerProduct" bottom: "{bottom}" top: "ip" inner_product_param {{ '
            'num_output: 2 } } layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "l" top: "loss" }')


def conv_chain(engine: str, layers: int, channels: int = 8, kernel: int = 3, size: int = 16) -> str:
    """``layers`` small convolutions on ``engine`` (CUDNN or CAFFE): a per-layer cost shows as the
    slope over ``layers``, a shared one (handle, workspace) as the step from 0 to 1."""
    text = _dummy(1, channels, size)
    for i in range(1, layers + 1):
        text += (f'layer {{ name: "c{i}" type: "Convolution" bottom: "c{i - 1}" top: "c{i}" convolution_param {{ '
                 f'num_output: {channels} kernel_size: {kernel} pad: {kernel // 2} engine: {engine} '
                 'weight_filler { type: "gaussian" std: 0.1 } } } ')
    return text + _head(f"c{layers}")


def neuron_chain(kind: str, layers: int) -> str:
    """``layers`` cuDNN ReLU or Pooling layers (not in place) on a small map: cuDNN's handle once,
    nothing per layer if the handle is shared."""
    text = _dummy(1, 8, 16)
    for i in range(1, layers + 1):
        param = ('relu_param { engine: CUDNN }' if kind == "relu" else
                 'pooling_param { pool: MAX kernel_size: 1 stride: 1 engine: CUDNN }')
        layer_type = "ReLU" if kind == "relu" else "Pooling"
        text += f'layer {{ name: "n{i}" type: "{layer_type}" bottom: "c{i - 1}" top: "c{i}" {param} }} '
    return text + _head(f"c{layers}")


def dropout_net() -> str:
    """The baseline with one Dropout layer: its mask is drawn with cuRAND, whose generator a
    thread makes on first use."""
    return (_dummy() + 'layer { name: "drop" type: "Dropout" bottom: "c0" top: "c1" dropout_param { '
            'dropout_ratio: 0.5 } } ' + _head("c1"))


def data_net(layers: int) -> str:
    """The baseline fed by ``layers`` Data layers (1: TRAIN only; 2: TRAIN and TEST), each with a
    prefetch thread and four prefetched 1x2x1x1 batches on the device."""
    text = ""
    for phase in ("TRAIN", "TEST")[:layers]:
        text += (f'layer {{ name: "d" type: "Data" top: "c0" top: "l" include {{ phase: {phase} }} data_param {{ '
                 f'source: "{DATA}/memory_tiny" batch_size: 1 backend: LMDB }} }} ')
    return text + _head("c0")
