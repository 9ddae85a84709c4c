"""caffetool: reproducible, fast training with real BVLC Caffe on today's machines.

The package is the library; ``tasks.py`` at the project root only wires it to Invoke.
Every failure a user can cause or fix is raised as a :class:`caffetool.errors.CaffetoolError`.
"""

__version__ = "0.1.0"
