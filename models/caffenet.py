"""CaffeNet (BVLC reference): AlexNet with pooling before normalisation, 227x227 crops."""

from _imagenet import MEAN, alexnet_convs_3_to_5, classifier, conv_relu

from caffetool.nets.model import Model


def build(n, L, P, data, label, num_classes, train):
    conv_relu(n, L, "conv1", data, 96, 11, stride=4)
    n.pool1 = L.Pooling(n.conv1, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    n.norm1 = L.LRN(n.pool1, local_size=5, alpha=0.0001, beta=0.75)
    conv_relu(n, L, "conv2", n.norm1, 256, 5, pad=2, group=2, bias=0.1)
    n.pool2 = L.Pooling(n.conv2, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    n.norm2 = L.LRN(n.pool2, local_size=5, alpha=0.0001, beta=0.75)
    return classifier(n, L, alexnet_convs_3_to_5(n, L, P, n.norm2), num_classes, train)


MODEL = Model(
    name="caffenet",
    title="CaffeNet (BVLC reference, AlexNet variant)",
    net_name="CaffeNet",
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
