"""The one error hierarchy of caffetool.

Library code raises these; the task layer catches :class:`CaffetoolError` once and prints
``Error: <message>``. Messages name what is wrong and the command that fixes it. Leaf classes
also inherit the matching built-in so callers may catch them the usual way.
"""


class CaffetoolError(Exception):
    """Base of every error a user can act on."""


class EngineError(CaffetoolError):
    """The Caffe engine is missing, broken or cannot be built."""


class EngineNotFound(EngineError, FileNotFoundError):
    """No engine is installed where one was looked for."""


class EngineCorrupt(EngineError):
    """Something is installed, but it is not a working engine."""


class BuildError(EngineError):
    """Configuring, compiling or installing Caffe failed."""


class BundleError(EngineError):
    """An engine bundle cannot be made, or is damaged or unsuitable for this machine."""


class SourceError(CaffetoolError):
    """Source tarballs or data files could not be obtained.

    ``attempts`` lists ``(source, reason)`` for every place tried, in order, so a caller can show
    the first cause without parsing the message.
    """

    def __init__(self, message: str, attempts: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.attempts = list(attempts or [])


class ChecksumMismatch(SourceError, ValueError):
    """A file's sha256 differs from the pinned one."""


class SystemDependencyError(CaffetoolError):
    """System packages are missing and cannot be installed from here."""


class ConfigError(CaffetoolError, ValueError):
    """An option, flag or ``invoke.yaml`` value is invalid."""


class DataError(CaffetoolError, ValueError):
    """A data set, database or data file is missing, damaged or not what it claims to be."""


class NetError(CaffetoolError, ValueError):
    """A net or solver description is unreadable or describes something impossible."""


class CaffeRefused(NetError):
    """Caffe itself rejected a net or solver (its FATAL line is the message)."""


class UnsupportedLayer(NetError):
    """A layer the engine cannot build because it belongs to another fork of Caffe (its type, a field it
    sets, or its Python module), as pycaffe's ``caffe.UnsupportedLayer`` says of the same nets.

    ``layer`` and ``layer_type`` name it; ``fork`` is where it comes from, or None where no table
    knows (:mod:`caffetool.nets.forks`).
    """

    def __init__(self, message: str, layer: str, layer_type: str, fork: str | None = None) -> None:
        super().__init__(message)
        self.layer, self.layer_type, self.fork = layer, layer_type, fork


class PythonLayerError(NetError):
    """A Python layer of a net raised while Caffe built or ran it; ``error`` is the exception's last
    line (``ValueError: ...``)."""

    def __init__(self, error: str) -> None:
        super().__init__(f"a Python layer of the net raised {error}")
        self.error = error


class RunError(CaffetoolError):
    """A training run cannot be made, resumed, tested or read, or Caffe failed inside it."""


class ImageError(CaffetoolError, ValueError):
    """An image given to the demo cannot be decoded, or would cost too much to decode."""


class DockerError(CaffetoolError):
    """An image cannot be built or run with the Docker found here."""


class ExportError(CaffetoolError, ValueError):
    """A net cannot be expressed in ONNX, or its ONNX model does not compute what Caffe computes."""


class TrackingError(CaffetoolError):
    """An MLflow tracking store cannot be opened or written (:mod:`caffetool.track`)."""
