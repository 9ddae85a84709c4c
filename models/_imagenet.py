"""Layer helpers shared by the ImageNet models (Caffe's BVLC reference definitions).

Convolution and InnerProduct layers learn weights at rate 1 with decay 1 and biases at rate 2
with no decay, as in BVLC's ``train_val.prototxt`` files.
"""

LR = [dict(lr_mult=1, decay_mult=1), dict(lr_mult=2, decay_mult=0)]
MEAN = (104.0, 117.0, 123.0)  # BGR means of ILSVRC 2012, as BVLC's nets subtract them


def conv_relu(n, L, name, bottom, num_output, kernel, stride=1, pad=0, group=1, std=0.01, bias=0.0):
    n[name] = L.Convolution(bottom, num_output=num_output, kernel_size=kernel, stride=stride, pad=pad,
                            group=group, param=LR, weight_filler=dict(type="gaussian", std=std),
                            bias_filler=dict(type="constant", value=bias))
    n[f"relu{name.removeprefix('conv')}"] = L.ReLU(n[name], in_place=True)
    return n[name]


def fc_relu_drop(n, L, index, bottom, num_output, train, std=0.005, bias=0.1):
    name = f"fc{index}"
    n[name] = L.InnerProduct(bottom, num_output=num_output, param=LR,
                             weight_filler=dict(type="gaussian", std=std),
                             bias_filler=dict(type="constant", value=bias))
    n[f"relu{index}"] = L.ReLU(n[name], in_place=True)
    n[f"drop{index}"] = L.Dropout(n[name], dropout_ratio=0.5, in_place=True)
    return n[name]


def classifier(n, L, bottom, num_classes, train):
    """fc6 and fc7 (4096 each, ReLU, dropout 0.5) and fc8 with the class scores."""
    fc6 = fc_relu_drop(n, L, 6, bottom, 4096, train)
    fc7 = fc_relu_drop(n, L, 7, fc6, 4096, train)
    n.fc8 = L.InnerProduct(fc7, num_output=num_classes, param=LR,
                           weight_filler=dict(type="gaussian", std=0.01),
                           bias_filler=dict(type="constant", value=0))
    return n.fc8


def alexnet_convs_3_to_5(n, L, P, bottom):
    """conv3 (384), grouped conv4 (384) and conv5 (256), all 3x3, then pool5."""
    conv_relu(n, L, "conv3", bottom, 384, 3, pad=1)
    conv_relu(n, L, "conv4", n.conv3, 384, 3, pad=1, group=2, bias=0.1)
    conv_relu(n, L, "conv5", n.conv4, 256, 3, pad=1, group=2, bias=0.1)
    n.pool5 = L.Pooling(n.conv5, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    return n.pool5
