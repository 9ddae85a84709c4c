"""Data sets: declared in :mod:`.registry`, fetched and verified by :mod:`.fetch`, parsed by
:mod:`.idx`, written as Caffe ``Datum`` databases by :mod:`.db`."""
