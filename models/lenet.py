"""LeNet exactly as Caffe's MNIST example defines it (examples/mnist/lenet_train_test.prototxt).

conv 20@5x5 → max-pool 2/2 → conv 50@5x5 → max-pool 2/2 → ip 500 → ReLU (in place) →
ip num_classes; xavier weights, constant biases, biases learn at twice the rate; pixels scaled
by 1/256.
"""

from caffetool.nets.declaration import Layers, Model, NetSpec, Params, Top

LR = [dict(lr_mult=1), dict(lr_mult=2)]
FILLERS = dict(weight_filler=dict(type="xavier"), bias_filler=dict(type="constant"))


def build(n: NetSpec, L: Layers, P: Params, data: Top, label: Top, num_classes: int, train: bool) -> Top:
    n.conv1 = L.Convolution(data, num_output=20, kernel_size=5, stride=1, param=LR, **FILLERS)
    n.pool1 = L.Pooling(n.conv1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.conv2 = L.Convolution(n.pool1, num_output=50, kernel_size=5, stride=1, param=LR, **FILLERS)
    n.pool2 = L.Pooling(n.conv2, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.ip1 = L.InnerProduct(n.pool2, num_output=500, param=LR, **FILLERS)
    n.relu1 = L.ReLU(n.ip1, in_place=True)
    n.ip2 = L.InnerProduct(n.relu1, num_output=num_classes, param=LR, **FILLERS)
    return n.ip2


MODEL = Model(
    name="lenet",
    title="LeNet (Caffe's MNIST example)",
    net_name="LeNet",
    channels=1,
    size=28,
    build=build,
    batch=(64, 100),
    transform=dict(scale=0.00390625),
    data_layer_name="mnist",
)
