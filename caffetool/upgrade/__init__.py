"""Old Caffe projects made to run today: Python 2 to 3 (:mod:`.python2`, :mod:`.division`,
:mod:`.ipynb`), nets and weights by Caffe's own tools (:mod:`.protos`), as a copy beside the
original with a report (:mod:`.upgraded`)."""
