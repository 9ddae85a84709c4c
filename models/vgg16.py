"""VGG-16 (configuration D of Simonyan & Zisserman): 13 3x3 convolutions in 5 blocks, 3 FC layers."""

from _imagenet import LR, classifier, ilsvrc_model

from caffetool.nets.declaration import Layers, NetSpec, Params, Top

BLOCKS = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))


def build(n: NetSpec, L: Layers, P: Params, data: Top, label: Top, num_classes: int, train: bool) -> Top:
    bottom = data
    for b, (width, convs) in enumerate(BLOCKS, start=1):
        for c in range(1, convs + 1):
            name = f"conv{b}_{c}"
            n[name] = L.Convolution(bottom, num_output=width, kernel_size=3, pad=1, param=LR,
                                    weight_filler=dict(type="xavier"), bias_filler=dict(type="constant"))
            n[f"relu{b}_{c}"] = L.ReLU(n[name], in_place=True)
            bottom = n[name]
        n[f"pool{b}"] = L.Pooling(bottom, pool=P.Pooling.MAX, kernel_size=2, stride=2)
        bottom = n[f"pool{b}"]
    return classifier(n, L, bottom, num_classes, train)


MODEL = ilsvrc_model("vgg16", "VGG-16", "VGG16", build, size=224, train_batch=64)
