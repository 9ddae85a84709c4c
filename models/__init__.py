"""The model declarations shipped with caffetool, one file per model, installed as ``caffetool.models``.

Each file is loaded by :func:`caffetool.nets.declaration.discover` from this folder (or from a user's
folder set as ``model.dir``), not imported as part of this package; files starting with ``_``
hold helpers the declarations share.
"""
