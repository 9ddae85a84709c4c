"""The model at inference: what every command that runs a trained net shares.

A run's model files and how inputs reach its net (:mod:`.modelfiles`), an image made into the net's
input as Caffe's tools make it (:mod:`.preprocess`, :mod:`.caffeio`: pycaffe's ``caffe.io`` steps),
and a run's own records fed as its TEST-phase data layer feeds them (:mod:`.records`). The demo,
``evaluate`` and ``export`` stand on it; it imports none of them.
"""
