"""Caffe models as ONNX, verified against Caffe: :mod:`.convert` builds the model layer by layer
(:mod:`.layers`, :mod:`.spatial`, :mod:`.normalization` on :mod:`.graph`), :mod:`.verify` runs it beside
pycaffe, :mod:`.exporter` writes it only when they agree, with :mod:`.preprocessing` as metadata or in
the graph; :mod:`.runtime` makes the onnxruntime sessions the verification and the backends use."""
