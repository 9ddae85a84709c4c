"""The seven published deploy nets the exports are measured on, and seeded weights for them.

BVLC's LeNet, CaffeNet (and its fully convolutional form from the net-surgery example), CIFAR-10
full and GoogLeNet deploy nets as the engine ships them; ResNet-50 in the layout of Kaiming He's
``ResNet-50-deploy.prototxt`` (KaimingHe/deep-residual-networks) and SqueezeNet v1.1 in that of
forresti/SqueezeNet's ``SqueezeNet_v1.1/deploy.prototxt``, both built here with pycaffe's
``net_spec`` at their published input size (224x224 and 227x227) and 1000 classes.

Weights are seeded and keep every activation finite and of the order of a trained net's
(:func:`randomise`, :func:`calibrate_batchnorm`), so a comparison with Caffe measures the
conversion rather than float32 overflow.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.memory_nets import bottleneck, conv_bn, squeezenet11

SHIPPED = {
    "lenet": "examples/mnist/lenet.prototxt",
    "caffenet": "models/bvlc_reference_caffenet/deploy.prototxt",
    "caffenet_full_conv": "examples/net_surgery/bvlc_caffenet_full_conv.prototxt",
    "cifar10_full": "examples/cifar10/cifar10_full.prototxt",
    "googlenet": "models/bvlc_googlenet/deploy.prototxt",
}


def resnet50_deploy(caffe: Any, size: int = 224, classes: int = 1000, blocks: tuple[int, ...] = (3, 4, 6, 3)) -> Any:
    """ResNet-50 as KaimingHe/deep-residual-networks ``prototxt/ResNet-50-deploy.prototxt`` lays it out:
    conv1 7x7/2 + BatchNorm + Scale + ReLU, max pool 3x3/2, stages of 3, 4, 6, 3 bottleneck blocks
    (the first of each projects its shortcut, stride 2 from res3a on), global average pool 7x7,
    fc1000, Softmax; a ``NetParameter`` with one Input layer ``data`` of 1x3xSIZExSIZE."""
    L, n = caffe.layers, caffe.NetSpec()
    n.data = L.Input(input_param={"shape": {"dim": [1, 3, size, size]}})
    x = conv_bn(caffe, n, "conv1", "_conv1", n.data, 64, 7, 2, 3, True)
    n.pool1 = L.Pooling(x, pooling_param={"pool": caffe.params.Pooling.MAX, "kernel_size": 3, "stride": 2})
    x = n.pool1
    for stage, count in enumerate(blocks):
        for i in range(count):
            x = bottleneck(caffe, n, x, f"{stage + 2}{chr(ord('a') + i)}", 64 * 2 ** stage,
                            2 if (i == 0 and stage > 0) else 1, i == 0)
    n.pool5 = L.Pooling(x, pooling_param={"pool": caffe.params.Pooling.AVE, "kernel_size": size // 32, "stride": 1})
    n.fc1000 = L.InnerProduct(n.pool5, inner_product_param={"num_output": classes})
    n.prob = L.Softmax(n.fc1000)
    return n.to_proto()


def squeezenet11_deploy(caffe: Any, size: int = 227, classes: int = 1000) -> Any:
    """SqueezeNet v1.1's deploy net: the training net of :func:`benchmarks.memory_nets.squeezenet11`
    at the published size, its ``DummyData`` an ``Input`` of 1x3xSIZExSIZE, loss and accuracy
    replaced by the published deploy net's Softmax ``prob`` on ``pool10``."""
    train = squeezenet11(caffe, 1, size, classes)
    net = caffe.proto.caffe_pb2.NetParameter(name="SqueezeNet_v1.1")
    net.layer.add(name="data", type="Input", top=["data"]).input_param.shape.add(dim=[1, 3, size, size])
    for layer in train.layer:
        if layer.type in ("DummyData", "SoftmaxWithLoss", "Accuracy"):
            continue
        net.layer.add().CopyFrom(layer)
    net.layer.add(name="prob", type="Softmax", bottom=["pool10"], top=["prob"])
    return net


BUILT: dict[str, Callable[[Any], Any]] = {"resnet50": resnet50_deploy, "squeezenet11": squeezenet11_deploy}
NAMES = (*SHIPPED, *BUILT)


def deploy_file(name: str, caffe: Any, share: Path, folder: Path) -> Path:
    """The deploy net ``name``: the engine's own file (``share``: its share/caffe), or one written in ``folder``."""
    if name in SHIPPED:
        return share / SHIPPED[name]
    path = folder / f"{name}.prototxt"
    path.write_text(str(BUILT[name](caffe)))
    return path


def seeded_weights(caffe: Any, deploy: Path, out: Path, seed: int = 0) -> Path:
    """Weights for ``deploy`` (:func:`randomise`, then :func:`calibrate_batchnorm`), saved by pycaffe in ``out``."""
    net = caffe.Net(str(deploy), caffe.TEST)
    rng = np.random.default_rng(seed)
    randomise(net, rng)
    calibrate_batchnorm(net, rng)
    net.save(str(out))
    return out


def randomise(net: Any, rng: np.random.Generator) -> None:
    """Seeded weights that keep activations finite and BatchNorm well defined."""
    for name, blobs in net.params.items():
        kind = net.layer_dict[name].type
        if kind == "BatchNorm":
            mean, variance, factor = (b.data for b in blobs)
            mean[...] = rng.normal(0.0, 0.1, mean.shape)
            variance[...] = rng.uniform(0.5, 1.5, variance.shape)
            factor[...] = 1.0
        elif kind == "Scale":
            blobs[0].data[...] = rng.uniform(0.8, 1.2, blobs[0].data.shape)
            for b in blobs[1:]:
                b.data[...] = rng.normal(0.0, 0.1, b.data.shape)
        else:
            weights = blobs[0].data
            fan_in = int(np.prod(weights.shape[1:])) or 1
            weights[...] = rng.normal(0.0, np.sqrt(2.0 / fan_in), weights.shape)
            for b in blobs[1:]:
                b.data[...] = rng.normal(0.0, 0.01, b.data.shape)


def calibrate_batchnorm(net: Any, rng: np.random.Generator) -> None:
    """Each BatchNorm's statistics from its own input on one seeded batch, as a trained net's match its
    data: random statistics do not normalise, and ResNet's shortcuts then grow its scores to ~1e4."""
    names = list(net._layer_names)
    bn = [i for i, layer in enumerate(net.layers) if layer.type == "BatchNorm"]
    if not bn:
        return
    data = net.blobs[net.inputs[0]].data
    data[...] = rng.standard_normal(data.shape)
    start = names[0]
    for i in bn:
        if i > 0:
            net.forward(start=start, end=names[i - 1])
        x = net.blobs[net.bottom_names[names[i]][0]].data
        mean, variance, factor = (b.data for b in net.params[names[i]])
        mean[...] = x.mean(axis=(0, *range(2, x.ndim)))
        variance[...] = x.var(axis=(0, *range(2, x.ndim))) + 1e-3
        factor[...] = 1.0
        start = names[i]
