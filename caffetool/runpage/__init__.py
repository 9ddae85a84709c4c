"""What a server shows of the run its model came from: the run in brief, its curves and newest
evaluation (:mod:`.runview`), as an HTML page (:mod:`.runpage`), and example images from its test
records (:mod:`.examples`)."""
