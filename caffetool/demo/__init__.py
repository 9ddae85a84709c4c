"""The demo server: an HTTP page and JSON API (:mod:`.webapp`, uploads read by :mod:`.multipart`),
the Open Inference Protocol's routes (:mod:`.v2`, messages in :mod:`.oip`), connections with
deadlines (:mod:`.protocol`), started by :mod:`.launcher`. The models it serves are
:mod:`caffetool.serving`'s; the run it shows, :mod:`caffetool.runpage`'s."""
