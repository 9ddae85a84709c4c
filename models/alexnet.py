"""AlexNet (BVLC's version): LRN before pooling, grouped conv2/4/5, dropout, 227x227 crops."""

from _imagenet import LR, MEAN, conv_relu, fc_relu_drop

from caffetool.nets.model import Model


def build(n, L, P, data, label, num_classes, train):
    conv_relu(n, L, "conv1", data, 96, 11, stride=4)
    n.norm1 = L.LRN(n.conv1, local_size=5, alpha=0.0001, beta=0.75)
    n.pool1 = L.Pooling(n.norm1, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    conv_relu(n, L, "conv2", n.pool1, 256, 5, pad=2, group=2, bias=0.1)
    n.norm2 = L.LRN(n.conv2, local_size=5, alpha=0.0001, beta=0.75)
    n.pool2 = L.Pooling(n.norm2, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    conv_relu(n, L, "conv3", n.pool2, 384, 3, pad=1)
    conv_relu(n, L, "conv4", n.conv3, 384, 3, pad=1, group=2, bias=0.1)
    conv_relu(n, L, "conv5", n.conv4, 256, 3, pad=1, group=2, bias=0.1)
    n.pool5 = L.Pooling(n.conv5, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    fc6 = fc_relu_drop(n, L, 6, n.pool5, 4096, train)
    fc7 = fc_relu_drop(n, L, 7, fc6, 4096, train)
    n.fc8 = L.InnerProduct(fc7, num_output=num_classes, param=LR,
                           weight_filler=dict(type="gaussian", std=0.01),
                           bias_filler=dict(type="constant", value=0))
    return n.fc8


MODEL = Model(
    name="alexnet",
    title="AlexNet (BVLC)",
    net_name="AlexNet",
    channels=3,
    size=227,
    build=build,
    batch=(256, 50),
    train_transform=dict(mirror=True),
    mean_value=MEAN,
    crop=True,
    top_k=(1, 5),
    num_classes=1000,
)
