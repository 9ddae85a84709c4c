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
