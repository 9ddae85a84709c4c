"""What the ImageNet models (Caffe's BVLC reference definitions) share: layer helpers, the
AlexNet family's layers, and the declaration every ILSVRC-2012 model makes.

Convolution and InnerProduct layers learn weights at rate 1 with decay 1 and biases at rate 2
with no decay, as in BVLC's ``train_val.prototxt`` files.
"""

from caffetool.nets.declaration import BuildFn, Layers, Model, NetSpec, Params, Top

LR = [dict(lr_mult=1, decay_mult=1), dict(lr_mult=2, decay_mult=0)]
MEAN = (104.0, 117.0, 123.0)  # BGR means of ILSVRC 2012, as BVLC's nets subtract them
LRN = dict(local_size=5, alpha=0.0001, beta=0.75)


def ilsvrc_model(name: str, title: str, net_name: str, build: BuildFn, size: int, train_batch: int) -> Model:
    """A model trained as BVLC train on ILSVRC 2012: 3-channel ``size`` crops, mirrored in training,
    the mean subtracted, 1000 classes, top-1 and top-5 accuracy, test batches of 50."""
    return Model(name=name, title=title, net_name=net_name, channels=3, size=size, build=build,
                 batch=(train_batch, 50), train_transform=dict(mirror=True), mean_value=MEAN, crop=True,
                 top_k=(1, 5), num_classes=1000)


def conv_relu(n: NetSpec, L: Layers, name: str, bottom: Top, num_output: int, kernel: int, stride: int = 1,
              pad: int = 0, group: int = 1, std: float = 0.01, bias: float = 0.0) -> Top:
    n[name] = L.Convolution(bottom, num_output=num_output, kernel_size=kernel, stride=stride, pad=pad,
                            group=group, param=LR, weight_filler=dict(type="gaussian", std=std),
                            bias_filler=dict(type="constant", value=bias))
    n[f"relu{name.removeprefix('conv')}"] = L.ReLU(n[name], in_place=True)
    return n[name]


def fc_relu_drop(n: NetSpec, L: Layers, index: int, bottom: Top, num_output: int, train: bool,
                 std: float = 0.005, bias: float = 0.1) -> Top:
    name = f"fc{index}"
    n[name] = L.InnerProduct(bottom, num_output=num_output, param=LR,
                             weight_filler=dict(type="gaussian", std=std),
                             bias_filler=dict(type="constant", value=bias))
    n[f"relu{index}"] = L.ReLU(n[name], in_place=True)
    n[f"drop{index}"] = L.Dropout(n[name], dropout_ratio=0.5, in_place=True)
    return n[name]


def classifier(n: NetSpec, L: Layers, bottom: Top, num_classes: int, train: bool) -> Top:
    """fc6 and fc7 (4096 each, ReLU, dropout 0.5) and fc8 with the class scores."""
    fc6 = fc_relu_drop(n, L, 6, bottom, 4096, train)
    fc7 = fc_relu_drop(n, L, 7, fc6, 4096, train)
    n.fc8 = L.InnerProduct(fc7, num_output=num_classes, param=LR,
                           weight_filler=dict(type="gaussian", std=0.01),
                           bias_filler=dict(type="constant", value=0))
    return n.fc8


def alexnet_build(norm_first: bool) -> BuildFn:
    """The AlexNet family's layers: after conv1 and conv2, LRN then max pooling (``norm_first``,
    AlexNet) or max pooling then LRN (CaffeNet); grouped conv2/4/5; the dropout classifier."""

    def build(n: NetSpec, L: Layers, P: Params, data: Top, label: Top, num_classes: int, train: bool) -> Top:
        conv_relu(n, L, "conv1", data, 96, 11, stride=4)
        top = _norm_and_pool(n, L, P, 1, n.conv1, norm_first)
        conv_relu(n, L, "conv2", top, 256, 5, pad=2, group=2, bias=0.1)
        top = _norm_and_pool(n, L, P, 2, n.conv2, norm_first)
        return classifier(n, L, _convs_3_to_5(n, L, P, top), num_classes, train)

    return build


def _norm_and_pool(n: NetSpec, L: Layers, P: Params, index: int, bottom: Top, norm_first: bool) -> Top:
    norm, pool = f"norm{index}", f"pool{index}"
    if norm_first:
        n[norm] = L.LRN(bottom, **LRN)
        n[pool] = L.Pooling(n[norm], pool=P.Pooling.MAX, kernel_size=3, stride=2)
        return n[pool]
    n[pool] = L.Pooling(bottom, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    n[norm] = L.LRN(n[pool], **LRN)
    return n[norm]


def _convs_3_to_5(n: NetSpec, L: Layers, P: Params, bottom: Top) -> Top:
    """conv3 (384), grouped conv4 (384) and conv5 (256), all 3x3, then pool5."""
    conv_relu(n, L, "conv3", bottom, 384, 3, pad=1)
    conv_relu(n, L, "conv4", n.conv3, 384, 3, pad=1, group=2, bias=0.1)
    conv_relu(n, L, "conv5", n.conv4, 256, 3, pad=1, group=2, bias=0.1)
    n.pool5 = L.Pooling(n.conv5, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    return n.pool5
