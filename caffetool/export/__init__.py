"""Caffe models as ONNX or PyTorch, verified against Caffe: :mod:`.onnxnet` and :mod:`.torchnet` build the
model layer by layer from the layer catalogue's translations (:mod:`caffetool.layers`), :mod:`.verify`
runs it beside pycaffe, :mod:`.exporter` writes it only when they agree, with :mod:`.preprocessing` as
metadata or in the graph."""
