"""Evaluating a trained classifier: the whole test database through its deploy net, or a user's own
labelled images through the demo's classifier, into a confusion matrix, per-class figures, top-k
accuracy and the most confident mistakes.

``records`` reads and transforms a database as Caffe's Data layer does, ``forward`` runs batches
through pycaffe or OpenCV, ``metrics`` is the arithmetic (numpy only), ``figures`` draws the PNGs,
``report`` writes the folder and the manifest, ``run`` joins them for a run and ``labelled`` for
``demo.classify --labelled``/``--list``.
"""
