"""The classification demo: a model loaded once (:mod:`.classifier`), uploads checked from their
header (:mod:`caffetool.data.imageheader`) and preprocessed with OpenCV (:mod:`.preprocess`), an HTTP server with
a page and a JSON API (:mod:`.server`, :mod:`.multipart`) whose connections have deadlines
(:mod:`.protocol`), started by :mod:`.serving`."""
