"""The classification demo: a model loaded once (:mod:`.model`), OpenCV preprocessing
(:mod:`.preprocess`), an HTTP server with a page and a JSON API (:mod:`.server`)."""
