"""The layer catalogue: every Caffe layer type caffetool knows, declared once with everything the project
does with it (its tops' shapes and memory, its ONNX and PyTorch translations) or the reason it does not.

One class per type (:mod:`.entry`), grouped by family (:mod:`.convolutions`, :mod:`.pooling`,
:mod:`.neurons`, :mod:`.normalizing`, :mod:`.shaping`, :mod:`.losses`, :mod:`.recurrent`,
:mod:`.sources`) and looked up in :mod:`.catalogue`; what the translations share lives beside them
(:mod:`.geometry`, Caffe's spatial arithmetic; :mod:`.allocation`, what a memory rule returns;
:mod:`.caffelayer`, :mod:`.onnxgraph` and :mod:`.torchlayer`, what an export's translation reads and
writes). Nothing here imports onnx or torch at import time: the memory estimate reads the catalogue
without them.
"""
