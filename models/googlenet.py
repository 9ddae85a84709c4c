"""GoogLeNet (BVLC's Inception v1): nine inception modules; two auxiliary classifiers whose
losses (weight 0.3) are added in the TRAIN phase only and which the deploy net does not have."""

from _imagenet import LR, ilsvrc_model

from caffetool.nets.declaration import Layers, NetSpec, Params, Top

# name: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection)
INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}
FILL = dict(weight_filler=dict(type="xavier"), bias_filler=dict(type="constant", value=0.2))


def conv(n: NetSpec, L: Layers, name: str, bottom: Top, num_output: int, kernel: int, stride: int = 1,
         pad: int = 0, relu_name: str | None = None, **extra: dict) -> Top:
    """Convolution + in-place ReLU; "inception_3a/1x1" gets "inception_3a/relu_1x1", as in BVLC's."""
    n[name] = L.Convolution(bottom, num_output=num_output, kernel_size=kernel, stride=stride, pad=pad,
                            param=LR, **FILL, **extra)
    n[relu_name or name.replace("/", "/relu_", 1)] = L.ReLU(n[name], in_place=True, **extra)
    return n[name]


def inception(n: NetSpec, L: Layers, P: Params, name: str, bottom: Top, widths: tuple[int, ...]) -> Top:
    p = f"inception_{name}"
    one, red3, three, red5, five, proj = widths
    b1 = conv(n, L, f"{p}/1x1", bottom, one, 1)
    r3 = conv(n, L, f"{p}/3x3_reduce", bottom, red3, 1)
    b3 = conv(n, L, f"{p}/3x3", r3, three, 3, pad=1)
    r5 = conv(n, L, f"{p}/5x5_reduce", bottom, red5, 1)
    b5 = conv(n, L, f"{p}/5x5", r5, five, 5, pad=2)
    n[f"{p}/pool"] = L.Pooling(bottom, pool=P.Pooling.MAX, kernel_size=3, stride=1, pad=1)
    bp = conv(n, L, f"{p}/pool_proj", n[f"{p}/pool"], proj, 1)
    n[f"{p}/output"] = L.Concat(b1, b3, b5, bp)
    return n[f"{p}/output"]


def aux_head(n: NetSpec, L: Layers, P: Params, k: int, bottom: Top, label: Top, num_classes: int) -> None:
    """An auxiliary classifier (TRAIN phase only) adding 0.3 x its loss."""
    train = dict(include=dict(phase=0))  # caffe_pb2.TRAIN
    p = f"loss{k}"
    n[f"{p}/ave_pool"] = L.Pooling(bottom, pool=P.Pooling.AVE, kernel_size=5, stride=3, **train)
    conv(n, L, f"{p}/conv", n[f"{p}/ave_pool"], 128, 1, relu_name=f"{p}/relu_conv", **train)
    n[f"{p}/fc"] = L.InnerProduct(n[f"{p}/conv"], num_output=1024, param=LR, **FILL, **train)
    n[f"{p}/relu_fc"] = L.ReLU(n[f"{p}/fc"], in_place=True, **train)
    n[f"{p}/drop_fc"] = L.Dropout(n[f"{p}/fc"], dropout_ratio=0.7, in_place=True, **train)
    n[f"{p}/classifier"] = L.InnerProduct(n[f"{p}/fc"], num_output=num_classes, param=LR,
                                          weight_filler=dict(type="xavier"),
                                          bias_filler=dict(type="constant", value=0), **train)
    n[f"{p}/loss"] = L.SoftmaxWithLoss(n[f"{p}/classifier"], label, loss_weight=0.3, **train)


def build(n: NetSpec, L: Layers, P: Params, data: Top, label: Top, num_classes: int, train: bool) -> Top:
    x = conv(n, L, "conv1/7x7_s2", data, 64, 7, stride=2, pad=3, relu_name="conv1/relu_7x7")
    n["pool1/3x3_s2"] = L.Pooling(x, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    n["pool1/norm1"] = L.LRN(n["pool1/3x3_s2"], local_size=5, alpha=0.0001, beta=0.75)
    x = conv(n, L, "conv2/3x3_reduce", n["pool1/norm1"], 64, 1, relu_name="conv2/relu_3x3_reduce")
    x = conv(n, L, "conv2/3x3", x, 192, 3, pad=1, relu_name="conv2/relu_3x3")
    n["conv2/norm2"] = L.LRN(x, local_size=5, alpha=0.0001, beta=0.75)
    n["pool2/3x3_s2"] = L.Pooling(n["conv2/norm2"], pool=P.Pooling.MAX, kernel_size=3, stride=2)
    x = n["pool2/3x3_s2"]
    for name, widths in INCEPTION.items():
        x = inception(n, L, P, name, x, widths)
        if name == "4a" and train:
            aux_head(n, L, P, 1, x, label, num_classes)
        if name == "4d" and train:
            aux_head(n, L, P, 2, x, label, num_classes)
        if name in ("3b", "4e"):
            pool = f"pool{name[0]}/3x3_s2"
            n[pool] = L.Pooling(x, pool=P.Pooling.MAX, kernel_size=3, stride=2)
            x = n[pool]
    n["pool5/7x7_s1"] = L.Pooling(x, pool=P.Pooling.AVE, kernel_size=7, stride=1)
    n["pool5/drop_7x7_s1"] = L.Dropout(n["pool5/7x7_s1"], dropout_ratio=0.4, in_place=True)
    n["loss3/classifier"] = L.InnerProduct(n["pool5/7x7_s1"], num_output=num_classes, param=LR,
                                           weight_filler=dict(type="xavier"),
                                           bias_filler=dict(type="constant", value=0))
    return n["loss3/classifier"]


MODEL = ilsvrc_model("googlenet", "GoogLeNet (BVLC, Inception v1)", "GoogleNet", build, size=224, train_batch=32)
