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


class SourceError(CaffetoolError):
    """Source tarballs or data files could not be obtained."""


class ChecksumMismatch(SourceError, ValueError):
    """A file's sha256 differs from the pinned one."""


class SystemDependencyError(CaffetoolError):
    """System packages are missing and cannot be installed from here."""


class ConfigError(CaffetoolError, ValueError):
    """An option or configuration value is invalid."""
