"""Nets people train, built from their published definitions, for the memory estimator's benchmark.

Each builder is a pure function ``build(caffe, batch) -> caffe_pb2.NetParameter``: a TRAIN net
(with a few TEST-only layers where the original has them) fed by ``DummyData`` — images or
sequences plus labels — and ending in its loss, built with pycaffe's ``net_spec``. The layer
patterns, kernel sizes, strides, pads, in-place layers and parameter settings follow the cited
definition; image sizes, and for the large nets the widths, are reduced (each docstring says how)
so that one test pass and one training step take seconds on 2 CPU cores. Memory is what is being
measured, not accuracy: data is random and labels are constant class 0.

:data:`NETS` declares them, each with the two batch sizes the benchmark measures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TEST = 1  # NetState phase
GAUSSIAN = {"type": "gaussian", "std": 1.0}
ZERO = {"type": "constant", "value": 0.0}
LEARN = [{"lr_mult": 1, "decay_mult": 1}, {"lr_mult": 2, "decay_mult": 0}]  # weights, bias
FROZEN = [{"lr_mult": 0}]


@dataclass(frozen=True)
class BenchNet:
    name: str
    build: Callable[[Any, int], Any]
    batches: tuple[int, int]
    follows: str


def _data(caffe: Any, n: Any, batch: int, image: tuple[int, ...], label: tuple[int, ...] = ()) -> None:
    """``n.data`` (random images) and ``n.label`` (class 0) of ``batch`` samples."""
    L = caffe.layers
    n.data, n.label = L.DummyData(ntop=2, dummy_data_param={
        "shape": [{"dim": [batch, *image]}, {"dim": [batch, *label]}], "data_filler": [GAUSSIAN, ZERO]})


def _conv(caffe: Any, bottom: Any, nout: int, ks: int, stride: int = 1, pad: int = 0, bias: bool = True,
          filler: str = "xavier") -> Any:
    conv = {"num_output": nout, "kernel_size": ks, "stride": stride, "pad": pad, "bias_term": bias,
            "weight_filler": {"type": filler}}
    return caffe.layers.Convolution(bottom, convolution_param=conv, param=LEARN if bias else LEARN[:1])


def _pool(caffe: Any, bottom: Any, ks: int, stride: int, pad: int = 0, method: str = "MAX") -> Any:
    pool = getattr(caffe.params.Pooling, method)
    return caffe.layers.Pooling(bottom, pooling_param={"pool": pool, "kernel_size": ks, "stride": stride, "pad": pad})


def _global_pool(caffe: Any, bottom: Any) -> Any:
    return caffe.layers.Pooling(bottom, pooling_param={"pool": caffe.params.Pooling.AVE, "global_pooling": True})


def _fc(caffe: Any, bottom: Any, nout: int, **extra: Any) -> Any:
    return caffe.layers.InnerProduct(bottom, param=LEARN, inner_product_param={
        "num_output": nout, "weight_filler": {"type": "xavier"}, **extra})


def _relu(caffe: Any, bottom: Any) -> Any:
    return caffe.layers.ReLU(bottom, in_place=True)


def _loss(caffe: Any, n: Any, scores: Any, **extra: Any) -> None:
    n.loss = caffe.layers.SoftmaxWithLoss(scores, n.label, **extra)


def _accuracy(caffe: Any, n: Any, name: str, scores: Any, **extra: Any) -> None:
    n[name] = caffe.layers.Accuracy(scores, n.label, include={"phase": TEST}, **extra)


# ---- ResNet-50 -----------------------------------------------------------------------------

def conv_bn(caffe: Any, n: Any, name: str, bn: str, bottom: Any, nout: int, ks: int, stride: int, pad: int,
             relu: bool) -> Any:
    """ResNet's unit: bias-free convolution, BatchNorm and Scale (bias_term) in place, ReLU in place."""
    L = caffe.layers
    n[name] = _conv(caffe, bottom, nout, ks, stride, pad, bias=False, filler="msra")
    n[f"bn{bn}"] = L.BatchNorm(n[name], in_place=True, param=[{"lr_mult": 0}] * 3)
    n[f"scale{bn}"] = L.Scale(n[name], in_place=True, scale_param={"bias_term": True})
    if relu:
        n[f"{name}_relu"] = L.ReLU(n[name], in_place=True)
    return n[name]


def bottleneck(caffe: Any, n: Any, bottom: Any, block: str, width: int, stride: int, project: bool) -> Any:
    """res{block}: 1x1 (stride) - 3x3 - 1x1 (4x width) plus the shortcut, Eltwise SUM, ReLU."""
    if project:
        short = conv_bn(caffe, n, f"res{block}_branch1", f"{block}_branch1", bottom, 4 * width, 1, stride, 0, False)
    else:
        short = bottom
    a = conv_bn(caffe, n, f"res{block}_branch2a", f"{block}_branch2a", bottom, width, 1, stride, 0, True)
    b = conv_bn(caffe, n, f"res{block}_branch2b", f"{block}_branch2b", a, width, 3, 1, 1, True)
    c = conv_bn(caffe, n, f"res{block}_branch2c", f"{block}_branch2c", b, 4 * width, 1, 1, 0, False)
    n[f"res{block}"] = caffe.layers.Eltwise(short, c, eltwise_param={"operation": caffe.params.Eltwise.SUM})
    n[f"res{block}_relu"] = caffe.layers.ReLU(n[f"res{block}"], in_place=True)
    return n[f"res{block}"]


def resnet50(caffe: Any, batch: int, size: int = 64, classes: int = 100, base: int = 64,
             blocks: tuple[int, ...] = (3, 4, 6, 3)) -> Any:
    """ResNet-50 (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016), as in
    KaimingHe/deep-residual-networks ``prototxt/ResNet-50-deploy.prototxt`` with training-mode
    BatchNorm (its three statistics blobs at ``lr_mult: 0``, as in Caffe's own
    ``examples/cifar10/cifar10_full_sigmoid_train_test_bn.prototxt``): conv1 7x7/2, max pool 3x3/2,
    stages of 3, 4, 6, 3 bottleneck blocks whose first block projects the shortcut (stride 2 on
    ``branch1`` and ``branch2a`` from res3a on), bias-free convolutions each followed by BatchNorm
    and Scale (``bias_term``) in place, global average pooling, fc, softmax loss.
    Reduced: 64x64 images (stage 5 works on 2x2 maps), 100 classes; widths as published.
    """
    n = caffe.NetSpec()
    _data(caffe, n, batch, (3, size, size))
    x = conv_bn(caffe, n, "conv1", "_conv1", n.data, base, 7, 2, 3, True)
    n.pool1 = _pool(caffe, x, 3, 2)
    x = n.pool1
    for stage, count in enumerate(blocks):
        for i in range(count):
            x = bottleneck(caffe, n, x, f"{stage + 2}{chr(ord('a') + i)}", base * 2 ** stage,
                            2 if (i == 0 and stage > 0) else 1, i == 0)
    n.pool5 = _global_pool(caffe, x)
    n.fc = _fc(caffe, n.pool5, classes)
    _loss(caffe, n, n.fc)
    _accuracy(caffe, n, "accuracy", n.fc)
    return n.to_proto()


# ---- GoogLeNet ------------------------------------------------------------------------------

INCEPTION = {  # name: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj), from BVLC's train_val.prototxt
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64), "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64), "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}
LRN = {"local_size": 5, "alpha": 0.0001, "beta": 0.75}


def _conv_relu(caffe: Any, n: Any, name: str, relu: str, bottom: Any, nout: int, ks: int, stride: int = 1,
               pad: int = 0) -> Any:
    n[name] = _conv(caffe, bottom, nout, ks, stride, pad)
    n[relu] = _relu(caffe, n[name])
    return n[name]


def _inception(caffe: Any, n: Any, bottom: Any, name: str) -> Any:
    """Four parallel branches (1x1; 1x1-3x3; 1x1-5x5; 3x3 max pool-1x1), concatenated."""
    c1, r3, c3, r5, c5, proj = INCEPTION[name]
    p = f"inception_{name}"
    b1 = _conv_relu(caffe, n, f"{p}/1x1", f"{p}/relu_1x1", bottom, c1, 1)
    b3 = _conv_relu(caffe, n, f"{p}/3x3_reduce", f"{p}/relu_3x3_reduce", bottom, r3, 1)
    b3 = _conv_relu(caffe, n, f"{p}/3x3", f"{p}/relu_3x3", b3, c3, 3, pad=1)
    b5 = _conv_relu(caffe, n, f"{p}/5x5_reduce", f"{p}/relu_5x5_reduce", bottom, r5, 1)
    b5 = _conv_relu(caffe, n, f"{p}/5x5", f"{p}/relu_5x5", b5, c5, 5, pad=2)
    n[f"{p}/pool"] = _pool(caffe, bottom, 3, 1, 1)
    bp = _conv_relu(caffe, n, f"{p}/pool_proj", f"{p}/relu_pool_proj", n[f"{p}/pool"], proj, 1)
    n[f"{p}/output"] = caffe.layers.Concat(b1, b3, b5, bp)
    return n[f"{p}/output"]


def _side_loss(caffe: Any, n: Any, bottom: Any, k: int, classes: int) -> None:
    """Auxiliary classifier lossK: 5x5/3 average pool, 1x1 conv 128, fc 1024, dropout 0.7, weight 0.3."""
    L = caffe.layers
    p = f"loss{k}"
    n[f"{p}/ave_pool"] = _pool(caffe, bottom, 5, 3, method="AVE")
    _conv_relu(caffe, n, f"{p}/conv", f"{p}/relu_conv", n[f"{p}/ave_pool"], 128, 1)
    n[f"{p}/fc"] = _fc(caffe, n[f"{p}/conv"], 1024)
    n[f"{p}/relu_fc"] = _relu(caffe, n[f"{p}/fc"])
    n[f"{p}/drop_fc"] = L.Dropout(n[f"{p}/fc"], in_place=True, dropout_param={"dropout_ratio": 0.7})
    n[f"{p}/classifier"] = _fc(caffe, n[f"{p}/fc"], classes)
    n[f"{p}/loss"] = L.SoftmaxWithLoss(n[f"{p}/classifier"], n.label, loss_weight=0.3)
    _accuracy(caffe, n, f"{p}/top-1", n[f"{p}/classifier"])


def googlenet(caffe: Any, batch: int, size: int = 96, classes: int = 100) -> Any:
    """GoogLeNet (Szegedy et al., "Going Deeper with Convolutions", CVPR 2015), as in BVLC Caffe's
    ``models/bvlc_googlenet/train_val.prototxt``: conv1 7x7/2, LRN, conv2 1x1 and 3x3, LRN, nine
    inception modules with its widths, the two auxiliary classifiers (loss1 after 4a, loss2 after
    4d, weight 0.3), global average pooling, dropout 0.4, classifier, loss3; top-1 accuracy in TEST.
    Reduced: 96x96 images (the side classifiers pool 6x6 maps to 2x2), 100 classes.
    """
    L = caffe.layers
    n = caffe.NetSpec()
    _data(caffe, n, batch, (3, size, size))
    x = _conv_relu(caffe, n, "conv1/7x7_s2", "conv1/relu_7x7", n.data, 64, 7, 2, 3)
    n["pool1/3x3_s2"] = _pool(caffe, x, 3, 2)
    n["pool1/norm1"] = L.LRN(n["pool1/3x3_s2"], lrn_param=LRN)
    x = _conv_relu(caffe, n, "conv2/3x3_reduce", "conv2/relu_3x3_reduce", n["pool1/norm1"], 64, 1)
    x = _conv_relu(caffe, n, "conv2/3x3", "conv2/relu_3x3", x, 192, 3, pad=1)
    n["conv2/norm2"] = L.LRN(x, lrn_param=LRN)
    n["pool2/3x3_s2"] = _pool(caffe, n["conv2/norm2"], 3, 2)
    x = _inception(caffe, n, n["pool2/3x3_s2"], "3a")
    x = _inception(caffe, n, x, "3b")
    n["pool3/3x3_s2"] = _pool(caffe, x, 3, 2)
    x = _inception(caffe, n, n["pool3/3x3_s2"], "4a")
    _side_loss(caffe, n, x, 1, classes)
    for name in ("4b", "4c", "4d"):
        x = _inception(caffe, n, x, name)
    _side_loss(caffe, n, x, 2, classes)
    x = _inception(caffe, n, x, "4e")
    n["pool4/3x3_s2"] = _pool(caffe, x, 3, 2)
    x = _inception(caffe, n, n["pool4/3x3_s2"], "5a")
    x = _inception(caffe, n, x, "5b")
    n["pool5/7x7_s1"] = _global_pool(caffe, x)
    n["pool5/drop_7x7_s1"] = L.Dropout(n["pool5/7x7_s1"], in_place=True, dropout_param={"dropout_ratio": 0.4})
    n["loss3/classifier"] = _fc(caffe, n["pool5/7x7_s1"], classes)
    n["loss3/loss3"] = L.SoftmaxWithLoss(n["loss3/classifier"], n.label, loss_weight=1)
    _accuracy(caffe, n, "loss3/top-1", n["loss3/classifier"])
    return n.to_proto()


# ---- SqueezeNet v1.1 ------------------------------------------------------------------------

FIRES = {"fire2": (16, 64), "fire3": (16, 64), "fire4": (32, 128), "fire5": (32, 128),
         "fire6": (48, 192), "fire7": (48, 192), "fire8": (64, 256), "fire9": (64, 256)}


def _fire(caffe: Any, n: Any, bottom: Any, name: str) -> Any:
    """Squeeze 1x1, then expand 1x1 and expand 3x3 side by side, concatenated."""
    squeeze, expand = FIRES[name]
    s = _conv_relu(caffe, n, f"{name}/squeeze1x1", f"{name}/relu_squeeze1x1", bottom, squeeze, 1)
    e1 = _conv_relu(caffe, n, f"{name}/expand1x1", f"{name}/relu_expand1x1", s, expand, 1)
    e3 = _conv_relu(caffe, n, f"{name}/expand3x3", f"{name}/relu_expand3x3", s, expand, 3, pad=1)
    n[f"{name}/concat"] = caffe.layers.Concat(e1, e3)
    return n[f"{name}/concat"]


def squeezenet11(caffe: Any, batch: int, size: int = 64, classes: int = 100) -> Any:
    """SqueezeNet v1.1 (Iandola et al., "SqueezeNet", arXiv:1602.07360), as in forresti/SqueezeNet
    ``SqueezeNet_v1.1/train_val.prototxt``: conv1 3x3/2 64, max pools 3x3/2 after conv1, fire3 and
    fire5, fire modules 2-9 with their widths, dropout 0.5, conv10 1x1 to the classes, ReLU, global
    average pooling, softmax loss. Reduced: 64x64 images, 100 classes.
    """
    L = caffe.layers
    n = caffe.NetSpec()
    _data(caffe, n, batch, (3, size, size))
    x = _conv_relu(caffe, n, "conv1", "relu_conv1", n.data, 64, 3, 2)
    n.pool1 = _pool(caffe, x, 3, 2)
    x = _fire(caffe, n, _fire(caffe, n, n.pool1, "fire2"), "fire3")
    n.pool3 = _pool(caffe, x, 3, 2)
    x = _fire(caffe, n, _fire(caffe, n, n.pool3, "fire4"), "fire5")
    n.pool5 = _pool(caffe, x, 3, 2)
    x = n.pool5
    for name in ("fire6", "fire7", "fire8", "fire9"):
        x = _fire(caffe, n, x, name)
    n.drop9 = L.Dropout(x, in_place=True, dropout_param={"dropout_ratio": 0.5})
    x = _conv_relu(caffe, n, "conv10", "relu_conv10", x, classes, 1)
    n.pool10 = _global_pool(caffe, x)
    _loss(caffe, n, n.pool10)
    _accuracy(caffe, n, "accuracy", n.pool10)
    return n.to_proto()


# ---- FCN-8s ---------------------------------------------------------------------------------

def _upscore(caffe: Any, bottom: Any, classes: int, ks: int, stride: int) -> Any:
    """A fixed (``lr_mult: 0``) bias-free Deconvolution with a bilinear filler, as FCN upsamples."""
    return caffe.layers.Deconvolution(bottom, param=FROZEN, convolution_param={
        "num_output": classes, "kernel_size": ks, "stride": stride, "bias_term": False,
        "weight_filler": {"type": "bilinear"}})


def _crop(caffe: Any, bottom: Any, like: Any, offset: int) -> Any:
    return caffe.layers.Crop(bottom, like, crop_param={"axis": 2, "offset": [offset]})


def fcn8s(caffe: Any, batch: int, size: int = 64, classes: int = 21, widths: tuple[int, ...] = (16, 32, 64, 128, 128),
          fc: int = 512) -> Any:
    """FCN-8s (Long, Shelhamer, Darrell, "Fully Convolutional Networks for Semantic Segmentation",
    CVPR 2015), as in shelhamer/fcn.berkeleyvision.org ``voc-fcn8s/net.py``: VGG-16's conv stages
    with ``pad: 100`` on conv1_1, fc6 as a 7x7 convolution and fc7 as 1x1 (dropout 0.5 in place),
    score layers on fc7, pool4 and pool3, fixed bilinear Deconvolutions (x2, x2, x8), Crop at
    offsets 5, 9 and 31, Eltwise SUM fusion, per-pixel SoftmaxWithLoss (``normalize: false``,
    ``ignore_label: 255``). Reduced: 64x64 images, a quarter of VGG-16's widths, 512 channels (an
    eighth) for fc6 and fc7.
    """
    L = caffe.layers
    n = caffe.NetSpec()
    _data(caffe, n, batch, (3, size, size), (1, size, size))
    x = n.data
    for stage, (width, convs) in enumerate(zip(widths, (2, 2, 3, 3, 3)), start=1):
        for i in range(1, convs + 1):
            x = _conv_relu(caffe, n, f"conv{stage}_{i}", f"relu{stage}_{i}", x, width, 3,
                           pad=100 if (stage, i) == (1, 1) else 1)
        n[f"pool{stage}"] = _pool(caffe, x, 2, 2)
        x = n[f"pool{stage}"]
    x = _conv_relu(caffe, n, "fc6", "relu6", x, fc, 7)
    n.drop6 = L.Dropout(x, in_place=True, dropout_param={"dropout_ratio": 0.5})
    x = _conv_relu(caffe, n, "fc7", "relu7", x, fc, 1)
    n.drop7 = L.Dropout(x, in_place=True, dropout_param={"dropout_ratio": 0.5})
    n.score_fr = _conv(caffe, x, classes, 1)
    n.upscore2 = _upscore(caffe, n.score_fr, classes, 4, 2)
    n.score_pool4 = _conv(caffe, n.pool4, classes, 1)
    n.score_pool4c = _crop(caffe, n.score_pool4, n.upscore2, 5)
    n.fuse_pool4 = L.Eltwise(n.upscore2, n.score_pool4c, eltwise_param={"operation": caffe.params.Eltwise.SUM})
    n.upscore_pool4 = _upscore(caffe, n.fuse_pool4, classes, 4, 2)
    n.score_pool3 = _conv(caffe, n.pool3, classes, 1)
    n.score_pool3c = _crop(caffe, n.score_pool3, n.upscore_pool4, 9)
    n.fuse_pool3 = L.Eltwise(n.upscore_pool4, n.score_pool3c, eltwise_param={"operation": caffe.params.Eltwise.SUM})
    n.upscore8 = _upscore(caffe, n.fuse_pool3, classes, 16, 8)
    n.score = _crop(caffe, n.upscore8, n.data, 31)
    _loss(caffe, n, n.score, loss_param={"normalize": False, "ignore_label": 255})
    return n.to_proto()


# ---- U-Net ----------------------------------------------------------------------------------

def _double_conv(caffe: Any, n: Any, name: str, bottom: Any, width: int) -> Any:
    x = _conv_relu(caffe, n, f"conv_{name}a", f"relu_{name}a", bottom, width, 3)
    return _conv_relu(caffe, n, f"conv_{name}b", f"relu_{name}b", x, width, 3)


def unet(caffe: Any, batch: int, size: int = 76, classes: int = 2, base: int = 16) -> Any:
    """U-Net (Ronneberger, Fischer, Brox, "U-Net: Convolutional Networks for Biomedical Image
    Segmentation", MICCAI 2015, Fig. 1): unpadded 3x3 convolutions in pairs, 2x2 max pooling,
    widths doubling down the contracting path; on the expanding path a 2x2 stride-2 up-convolution
    (Deconvolution) halving the width, the contracting path's map cropped to it (Crop) and
    concatenated (Concat), two 3x3 convolutions; a 1x1 convolution to the classes and a per-pixel
    softmax loss. Reduced: two poolings instead of four, 76x76 tiles (36x36 output), base width 16
    instead of 64.
    """
    L = caffe.layers
    n = caffe.NetSpec()
    out = size - 40  # 76 -> 72 -> 36 -> 32 -> 16 -> 12, then 24 -> 20 -> 40 -> 36
    _data(caffe, n, batch, (1, size, size), (1, out, out))
    d1 = _double_conv(caffe, n, "d1", n.data, base)
    n.pool1 = _pool(caffe, d1, 2, 2)
    d2 = _double_conv(caffe, n, "d2", n.pool1, 2 * base)
    n.pool2 = _pool(caffe, d2, 2, 2)
    x = _double_conv(caffe, n, "bottom", n.pool2, 4 * base)
    for level, (skip, width, offset) in enumerate(((d2, 2 * base, 4), (d1, base, 16)), start=1):
        n[f"up{level}"] = L.Deconvolution(x, param=LEARN, convolution_param={
            "num_output": width, "kernel_size": 2, "stride": 2, "weight_filler": {"type": "xavier"}})
        n[f"relu_up{level}"] = _relu(caffe, n[f"up{level}"])
        n[f"crop{level}"] = _crop(caffe, skip, n[f"up{level}"], offset)
        n[f"concat{level}"] = L.Concat(n[f"crop{level}"], n[f"up{level}"])
        x = _double_conv(caffe, n, f"u{level}", n[f"concat{level}"], width)
    n.score = _conv(caffe, x, classes, 1)
    _loss(caffe, n, n.score)
    return n.to_proto()


# ---- LRCN: recurrent nets over sentences ----------------------------------------------------

def _lrcn(caffe: Any, batch: int, cell: str, steps: int = 20, vocab: int = 1000, hidden: int = 256,
          size: int = 32) -> Any:
    """LRCN's factored captioning net: an image branch feeding lstm2 as its static input."""
    L = caffe.layers
    n = caffe.NetSpec()
    seq = {"dim": [steps, batch]}
    n.data, n.cont_sentence, n.input_sentence, n.target_sentence = L.DummyData(ntop=4, dummy_data_param={
        "shape": [{"dim": [batch, 3, size, size]}, seq, seq, seq],
        "data_filler": [GAUSSIAN, {"type": "constant", "value": 1.0},
                        {"type": "uniform", "min": 0, "max": vocab - 1}, ZERO]})
    x = _conv_relu(caffe, n, "conv1", "relu1", n.data, 32, 5, 2, 2)
    n.pool1 = _pool(caffe, x, 3, 2)
    n.norm1 = L.LRN(n.pool1, lrn_param=LRN)
    x = _conv_relu(caffe, n, "conv2", "relu2", n.norm1, 64, 3, pad=1)
    n.pool2 = _pool(caffe, x, 3, 2)
    n.fc8 = _fc(caffe, n.pool2, hidden)
    n.embedding = L.Embed(n.input_sentence, param=LEARN[:1], embed_param={
        "bias_term": False, "input_dim": vocab, "num_output": hidden,
        "weight_filler": {"type": "uniform", "min": -0.08, "max": 0.08}})
    recurrent = {"num_output": hidden, "weight_filler": {"type": "uniform", "min": -0.08, "max": 0.08},
                 "bias_filler": ZERO}
    n.lstm1 = getattr(L, cell)(n.embedding, n.cont_sentence, recurrent_param=recurrent)
    n.lstm2 = getattr(L, cell)(n.lstm1, n.cont_sentence, n.fc8, recurrent_param=recurrent)
    n.predict = _fc(caffe, n.lstm2, vocab, axis=2)
    n.cross_entropy_loss = L.SoftmaxWithLoss(n.predict, n.target_sentence, loss_weight=20,
                                             loss_param={"ignore_label": -1}, softmax_param={"axis": 2})
    n.accuracy = L.Accuracy(n.predict, n.target_sentence, include={"phase": TEST},
                            accuracy_param={"axis": 2, "ignore_label": -1})
    return n.to_proto()


def lrcn_lstm(caffe: Any, batch: int) -> Any:
    """LRCN (Donahue et al., "Long-term Recurrent Convolutional Networks for Visual Recognition and
    Description", CVPR 2015), the factored captioning net of LisaAnne/lisa-caffe-public
    ``examples/coco_caption/lrcn.prototxt`` (the LRCN authors' Caffe; the LSTM layer is BVLC Caffe's
    ``lstm_layer.cpp`` from the same work): sentences laid out T x N (20 time steps), ``cont``
    markers, Embed, lstm1 over the words, lstm2 with the image feature as its static input, the
    prediction an InnerProduct with ``axis: 2``, SoftmaxWithLoss over every time step (``axis: 2``,
    ``ignore_label: -1``, weight 20), accuracy in TEST. Reduced: a two-convolution image branch on
    32x32 images instead of CaffeNet, vocabulary 1,000 and 256 hidden units instead of 8,945 and 1,000.
    """
    return _lrcn(caffe, batch, "LSTM")


def lrcn_rnn(caffe: Any, batch: int) -> Any:
    """:func:`lrcn_lstm` with BVLC Caffe's plain ``RNN`` layer (``rnn_layer.cpp``) in place of LSTM."""
    return _lrcn(caffe, batch, "RNN")


# ---- Siamese --------------------------------------------------------------------------------

def _siamese_tower(caffe: Any, n: Any, bottom: Any, suffix: str) -> Any:
    """LeNet tower whose parameters are shared by name with the other tower's."""
    L = caffe.layers

    def shared(name: str) -> list[dict]:
        return [{"name": f"{name}_w", "lr_mult": 1}, {"name": f"{name}_b", "lr_mult": 2}]

    n[f"conv1{suffix}"] = L.Convolution(bottom, param=shared("conv1"), convolution_param={
        "num_output": 20, "kernel_size": 5, "weight_filler": {"type": "xavier"}})
    n[f"pool1{suffix}"] = _pool(caffe, n[f"conv1{suffix}"], 2, 2)
    n[f"conv2{suffix}"] = L.Convolution(n[f"pool1{suffix}"], param=shared("conv2"), convolution_param={
        "num_output": 50, "kernel_size": 5, "weight_filler": {"type": "xavier"}})
    n[f"pool2{suffix}"] = _pool(caffe, n[f"conv2{suffix}"], 2, 2)
    n[f"ip1{suffix}"] = L.InnerProduct(n[f"pool2{suffix}"], param=shared("ip1"),
                                       inner_product_param={"num_output": 500, "weight_filler": {"type": "xavier"}})
    n[f"relu1{suffix}"] = _relu(caffe, n[f"ip1{suffix}"])
    n[f"ip2{suffix}"] = L.InnerProduct(n[f"ip1{suffix}"], param=shared("ip2"),
                                       inner_product_param={"num_output": 10, "weight_filler": {"type": "xavier"}})
    n[f"feat{suffix}"] = L.InnerProduct(n[f"ip2{suffix}"], param=shared("feat"),
                                        inner_product_param={"num_output": 2, "weight_filler": {"type": "xavier"}})
    return n[f"feat{suffix}"]


def siamese(caffe: Any, batch: int) -> Any:
    """The siamese LeNet of BVLC Caffe's ``examples/siamese/mnist_siamese_train_test.prototxt``
    (Hadsell, Chopra, LeCun, "Dimensionality Reduction by Learning an Invariant Mapping", CVPR 2006):
    image pairs stacked as two channels, split by Slice, two towers sharing every parameter by name,
    ContrastiveLoss (margin 1) on the two 2-D features and the similarity label. Unreduced (28x28).
    """
    L = caffe.layers
    n = caffe.NetSpec()
    n.pair_data, n.sim = L.DummyData(ntop=2, dummy_data_param={
        "shape": [{"dim": [batch, 2, 28, 28]}, {"dim": [batch]}], "data_filler": [GAUSSIAN, ZERO]})
    n.data, n.data_p = L.Slice(n.pair_data, ntop=2, slice_param={"slice_dim": 1, "slice_point": [1]})
    feat = _siamese_tower(caffe, n, n.data, "")
    feat_p = _siamese_tower(caffe, n, n.data_p, "_p")
    n.loss = L.ContrastiveLoss(feat, feat_p, n.sim, contrastive_loss_param={"margin": 1.0})
    return n.to_proto()


# ---- Gates and activations -----------------------------------------------------------------

def gates(caffe: Any, batch: int, size: int = 32, classes: int = 10) -> Any:
    """A convnet made of published gating and activation patterns, one per layer type:
    PReLU (He et al., ICCV 2015) and ELU (Clevert et al., ICLR 2016) after convolutions, in place;
    maxout (Goodfellow et al., ICML 2013) as Slice plus Eltwise MAX; a gated unit
    (Dauphin et al., ICML 2017; van den Oord et al.'s PixelCNN gate) as Sigmoid x TanH with
    Eltwise PROD; a fixed binary mask from Threshold (no backward); squeeze-and-excitation
    (Hu et al., CVPR 2018) as global pooling, Reshape, two InnerProducts and Scale with two bottoms
    (``axis: 0``); learned and per-sample Bias; Tile to broadcast a per-channel vector back over
    the map; a chain of AbsVal, Power, Log, Exp and BNLL; Dropout in place, Flatten, a Reduction
    (SUMSQ) penalty with a loss weight, softmax loss, ArgMax in TEST. Small: 32x32 images, 10 classes.
    """
    L = caffe.layers
    P = caffe.params
    n = caffe.NetSpec()
    half = size // 2
    n.data, n.label, n.mask_source = L.DummyData(ntop=3, dummy_data_param={
        "shape": [{"dim": [batch, 3, size, size]}, {"dim": [batch]}, {"dim": [batch, 32, half, half]}],
        "data_filler": [GAUSSIAN, ZERO, {"type": "uniform", "min": 0, "max": 1}]})
    n.conv1 = _conv(caffe, n.data, 32, 3, pad=1)
    n.prelu1 = L.PReLU(n.conv1, in_place=True)
    n.pool1 = _pool(caffe, n.conv1, 2, 2)
    n.conv2 = _conv(caffe, n.pool1, 64, 3, pad=1)
    n.elu2 = L.ELU(n.conv2, in_place=True)
    n.maxout_a, n.maxout_b = L.Slice(n.conv2, ntop=2, slice_param={"axis": 1, "slice_point": [32]})
    n.maxout = L.Eltwise(n.maxout_a, n.maxout_b, eltwise_param={"operation": P.Eltwise.MAX})
    n.conv3 = _conv(caffe, n.maxout, 64, 3, pad=1)
    n.gate_a, n.gate_b = L.Slice(n.conv3, ntop=2, slice_param={"axis": 1, "slice_point": [32]})
    n.gate_sigmoid = L.Sigmoid(n.gate_a)
    n.gate_tanh = L.TanH(n.gate_b)
    n.gated = L.Eltwise(n.gate_sigmoid, n.gate_tanh, eltwise_param={"operation": P.Eltwise.PROD})
    n.mask = L.Threshold(n.mask_source, threshold_param={"threshold": 0.5})
    n.masked = L.Eltwise(n.gated, n.mask, eltwise_param={"operation": P.Eltwise.PROD})
    n.squeeze = _global_pool(caffe, n.masked)
    n.squeeze_flat = L.Reshape(n.squeeze, reshape_param={"shape": {"dim": [0, -1]}})
    n.excite1 = _fc(caffe, n.squeeze_flat, 8)
    n.excite1_relu = _relu(caffe, n.excite1)
    n.excite2 = _fc(caffe, n.excite1, 32)
    n.excite = L.Sigmoid(n.excite2)
    n.scaled = L.Scale(n.masked, n.excite, scale_param={"axis": 0})
    n.biased = L.Bias(n.scaled, param=[{"lr_mult": 1}], bias_param={"axis": 1, "num_axes": 1})
    n.context = _fc(caffe, n.squeeze_flat, 32)
    n.context_biased = L.Bias(n.biased, n.context, bias_param={"axis": 0})
    n.broadcast = L.Reshape(n.context, reshape_param={"shape": {"dim": [0, 0, 1, 1]}})
    n.tile_h = L.Tile(n.broadcast, tile_param={"axis": 2, "tiles": half})
    n.tile_w = L.Tile(n.tile_h, tile_param={"axis": 3, "tiles": half})
    n.summed = L.Eltwise(n.context_biased, n.tile_w, eltwise_param={"operation": P.Eltwise.SUM})
    n.absval = L.AbsVal(n.summed)
    n.power = L.Power(n.absval, power_param={"power": 2.0, "scale": 0.5, "shift": 1.0})
    n.log = L.Log(n.power)
    n.exp = L.Exp(n.log, exp_param={"scale": -1.0})
    n.bnll = L.BNLL(n.exp)
    n.drop = L.Dropout(n.bnll, in_place=True, dropout_param={"dropout_ratio": 0.5})
    n.pool2 = _pool(caffe, n.bnll, 2, 2)
    n.flat = L.Flatten(n.pool2)
    n.fc = _fc(caffe, n.flat, classes)
    _loss(caffe, n, n.fc)
    n.penalty = L.Reduction(n.flat, reduction_param={"operation": P.Reduction.SUMSQ, "axis": 0}, loss_weight=1e-4)
    n.argmax = L.ArgMax(n.fc, include={"phase": TEST}, argmax_param={"top_k": 1})
    return n.to_proto()


# ---- Heads and losses -----------------------------------------------------------------------

def heads(caffe: Any, batch: int, size: int = 24, classes: int = 10) -> Any:
    """One trunk, many heads, each with a loss people train with: an Im2col-plus-1x1 convolution
    (BVLC Caffe's ``im2col_layer.cpp``), spatial pyramid pooling (SPP, He et al., ECCV 2014,
    three levels), a shared fc with Dropout, then HingeLoss (one-vs-all SVM), SigmoidCrossEntropyLoss
    on multi-label targets (BVLC's ``examples/pascal-multilabel-with-datalayer``), EuclideanLoss on
    4 box coordinates, InfogainLoss with its H matrix as a third bottom, and Softmax into
    MultinomialLogisticLoss; ArgMax in TEST. Small: 24x24 images, 10 classes.
    """
    L = caffe.layers
    P = caffe.params
    n = caffe.NetSpec()
    n.data, n.label, n.targets, n.boxes, n.infogain = L.DummyData(ntop=5, dummy_data_param={
        "shape": [{"dim": [batch, 3, size, size]}, {"dim": [batch]}, {"dim": [batch, classes]},
                  {"dim": [batch, 4]}, {"dim": [1, 1, classes, classes]}],
        "data_filler": [GAUSSIAN, ZERO, {"type": "uniform", "min": 0, "max": 1}, GAUSSIAN,
                        {"type": "constant", "value": 1.0}]})
    n.columns = L.Im2col(n.data, convolution_param={"kernel_size": 3, "pad": 1})
    x = _conv_relu(caffe, n, "conv1", "relu1", n.columns, 32, 1)
    x = _conv_relu(caffe, n, "conv2", "relu2", x, 32, 3, pad=1)
    n.spp = L.SPP(x, spp_param={"pyramid_height": 3, "pool": P.SPP.MAX})
    n.fc = _fc(caffe, n.spp, 128)
    n.fc_relu = _relu(caffe, n.fc)
    n.fc_drop = L.Dropout(n.fc, in_place=True, dropout_param={"dropout_ratio": 0.5})
    n.svm = _fc(caffe, n.fc, classes)
    n.hinge_loss = L.HingeLoss(n.svm, n.label, hinge_loss_param={"norm": P.HingeLoss.L2})
    n.multilabel = _fc(caffe, n.fc, classes)
    n.multilabel_loss = L.SigmoidCrossEntropyLoss(n.multilabel, n.targets)
    n.box = _fc(caffe, n.fc, 4)
    n.box_loss = L.EuclideanLoss(n.box, n.boxes)
    n.info = _fc(caffe, n.fc, classes)
    n.infogain_loss = L.InfogainLoss(n.info, n.label, n.infogain)
    n.logits = _fc(caffe, n.fc, classes)
    n.prob = L.Softmax(n.logits)
    n.logistic_loss = L.MultinomialLogisticLoss(n.prob, n.label)
    n.argmax = L.ArgMax(n.svm, include={"phase": TEST})
    return n.to_proto()


NETS: tuple[BenchNet, ...] = (
    BenchNet("resnet50", resnet50, (4, 16), "ResNet-50, 64x64"),
    BenchNet("googlenet", googlenet, (4, 16), "BVLC GoogLeNet with both side losses, 96x96"),
    BenchNet("squeezenet11", squeezenet11, (8, 32), "SqueezeNet v1.1, 64x64"),
    BenchNet("fcn8s", fcn8s, (2, 8), "FCN-8s, VGG-16 widths / 4, 64x64"),
    BenchNet("unet", unet, (2, 8), "U-Net, two levels, width 16, 76x76 tiles"),
    BenchNet("lrcn-lstm", lrcn_lstm, (4, 16), "LRCN factored captioner, LSTM, 20 steps"),
    BenchNet("lrcn-rnn", lrcn_rnn, (4, 16), "LRCN factored captioner, RNN, 20 steps"),
    BenchNet("siamese", siamese, (16, 64), "BVLC mnist siamese, ContrastiveLoss"),
    BenchNet("gates", gates, (8, 32), "gating and activation layers, 32x32"),
    BenchNet("heads", heads, (8, 32), "Im2col, SPP and five losses, 24x24"),
)


def get(name: str) -> BenchNet:
    """The declared net called ``name``."""
    for net in NETS:
        if net.name == name:
            return net
    raise KeyError(f"no benchmark net {name!r}; known: {', '.join(n.name for n in NETS)}")
