"""Caffe models as ONNX, verified against Caffe: :mod:`.onnxnet` builds the model layer by layer
(:mod:`.onnxlayers`, :mod:`.spatial`, :mod:`.normalization` on :mod:`.onnxgraph`), :mod:`.verify` runs it beside
pycaffe, :mod:`.exporter` writes it only when they agree, with :mod:`.preprocessing` as metadata or in
the graph; :mod:`.runtime` makes the onnxruntime sessions the verification and the backends use."""
