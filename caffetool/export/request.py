"""What one export is asked to do: the model files, where the model goes, and the options of its format.

Its own module so that the formats (:mod:`.formats` and each format's module) and the exporter that
calls them all read it without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from caffetool.inference import modelfiles

DEFAULT_FORMAT = "onnx"
DEFAULT_OPSET = 17
DEFAULT_TOLERANCE = 1e-4


@dataclass
class ExportRequest:
    files: modelfiles.ModelFiles
    out: Path  # the model file
    opset: int = DEFAULT_OPSET
    batch: int | None = None  # None: dynamic
    tolerance: float = DEFAULT_TOLERANCE
    images: int | None = None
    with_preprocessing: bool = False
    to: str = DEFAULT_FORMAT
