"""Pure builders: a Model → train/test ``NetParameter`` and deploy ``NetParameter``.

Both nets come from one call of the model's ``build`` on a ``caffe.NetSpec``; only the ends
differ: the train/test net starts with one Data layer per phase and ends with accuracy and the
loss, the deploy net starts with an Input layer and ends with a Softmax named ``prob``. Nothing
here writes files or runs Caffe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caffetool.nets.declaration import Model


@dataclass(frozen=True)
class DataSource:
    train: str
    test: str
    backend: str = "lmdb"


@dataclass(frozen=True)
class Shape:
    channels: int
    size: int
    num_classes: int


def shape_of(model: Model, channels: int | None = None, size: int | None = None,
             num_classes: int | None = None) -> Shape:
    return Shape(channels or model.channels, size or model.size, num_classes or model.num_classes)


def _body(caffe: Any, model: Model, shape: Shape, batch: int, train: bool) -> tuple[Any, Any]:
    """(NetSpec, scores Top) with the model's layers after an Input layer."""
    L, P = caffe.layers, caffe.params
    n = caffe.NetSpec()
    dims = [batch, shape.channels, shape.size, shape.size]
    if train:
        n.data, n.label = L.Input(shape=[dict(dim=dims), dict(dim=[batch])], ntop=2)
        scores = model.build(n, L, P, n.data, n.label, shape.num_classes, True)
    else:
        n.data = L.Input(shape=dict(dim=dims))
        scores = model.build(n, L, P, n.data, None, shape.num_classes, False)
    return n, scores


def deploy(caffe: Any, model: Model, shape: Shape, batch: int = 1) -> Any:
    """The deploy net: Input ``data`` of (batch, C, H, W) … Softmax ``prob``."""
    n, scores = _body(caffe, model, shape, batch, train=False)
    n.prob = caffe.layers.Softmax(scores)
    net = n.to_proto()
    net.name = model.net_name
    return net


def train_val(caffe: Any, model: Model, shape: Shape, source: DataSource, batch: int, test_batch: int) -> Any:
    """The train/test net, as Caffe's examples lay it out (data per phase, accuracy, loss)."""
    pb = caffe.proto.caffe_pb2
    n, scores = _body(caffe, model, shape, batch, train=True)
    L = caffe.layers
    for k in model.top_k:
        name = "accuracy" if k == 1 else f"accuracy_top{k}"
        kwargs = {"accuracy_param": dict(top_k=k)} if k != 1 else {}
        n[name] = L.Accuracy(scores, n.label, include=dict(phase=pb.TEST), **kwargs)
    n.loss = L.SoftmaxWithLoss(scores, n.label)
    body = n.to_proto()
    net = pb.NetParameter(name=model.net_name)
    for phase, where, size in ((pb.TRAIN, source.train, batch), (pb.TEST, source.test, test_batch)):
        net.layer.append(_data_layer(pb, model, shape, phase, where, size, source.backend))
    net.layer.extend(layer for layer in body.layer if layer.type != "Input")
    return net


def _data_layer(pb: Any, model: Model, shape: Shape, phase: int, source: str, batch: int, backend: str) -> Any:
    layer = pb.LayerParameter(name=model.data_layer_name, type="Data", top=["data", "label"])
    layer.include.add(phase=phase)
    transform = dict(model.transform, **(model.train_transform if phase == pb.TRAIN else {}))
    if model.crop:
        transform["crop_size"] = shape.size
    for key, value in transform.items():
        setattr(layer.transform_param, key, value)
    layer.transform_param.mean_value.extend(model.mean_value[: shape.channels])
    layer.data_param.source = source
    layer.data_param.batch_size = batch
    layer.data_param.backend = pb.DataParameter.LEVELDB if backend == "leveldb" else pb.DataParameter.LMDB
    return layer
