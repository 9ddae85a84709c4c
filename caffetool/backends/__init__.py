"""Inference backends: one door to run a Caffe model, or its export, on pycaffe, onnxruntime, OpenCV or PyTorch.

:func:`caffetool.backends.dispatch.load` takes a backend's name (a row of ``dispatch.BACKENDS``), the
files it reads (:class:`~caffetool.backends.loaded.ModelSource`), a device and the blobs wanted, and
gives a model with one forward call: feeds by input name in, the wanted blobs by name out. Each
backend is one module (:mod:`.pycaffe`, :mod:`.onnxrt`, :mod:`.opencvdnn`, :mod:`.torchmodule`);
:mod:`.devices` decides where pycaffe and ``caffe`` run. The package sits below the export, the
evaluation and the server: it runs files it is given, and making an export to run is the caller's
(:mod:`caffetool.export.served`).
"""
