"""The export formats, declared as data: one row per format, the generic flow of :mod:`.exporter`
calling the row's functions and ``caffetool export`` reading the row for its flags.

A format is one module (:mod:`.onnxformat`, :mod:`.torchformat`) plus one row of :data:`FORMATS`:
the files it writes (the model, files beside it, its record), the request options that apply to it
alone, the optional extra it needs, and its functions. A format's *written form* is whatever its
module makes of a converted net and reads back from its files (an ONNX ``ModelProto``; a PyTorch
module's text and weights): the exporter never looks inside it, it hands it back to the row's
functions for the bytes to write, the verification's runner and the record.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caffetool.choices import choose
from caffetool.errors import ConfigError
from caffetool.export import onnxformat, onnxnet, torchformat, torchnet
from caffetool.export.request import DEFAULT_FORMAT

if TYPE_CHECKING:
    from caffetool.export.request import ExportRequest
    from caffetool.export.preprocessing import Preprocessing
    from caffetool.export.verify import Run

Conversion = onnxnet.Converted | torchnet.TorchConverted  # what a format's convert gives


def _nothing_to_refuse(_: Any) -> None:
    """A check a format does not need."""


def _same(stem: str) -> str:
    return stem


@dataclass(frozen=True)
class ExportFormat:
    """One export format: its files and options as data, and the functions the exporter calls."""

    name: str  # --to NAME
    title: str  # as messages name it
    suffix: str  # the model file's
    record_suffix: str  # the record's, in place of the model's suffix: a.onnx -> a.export.json
    refusals: Callable[[Any], None]  # the deploy NetParameter's first layer the format cannot write, refused
    convert: Callable[[Any, Any, ExportRequest, str], Conversion]  # (NetParameter, pycaffe net, request, name)
    finish: Callable[[Conversion, Preprocessing | None, list[str] | None, ExportRequest], Any]  # the written form
    contents: Callable[[Any, Path], dict[Path, bytes]]  # the written form as files, given the model's path
    runner: Callable[[Any, Conversion, str], Run]  # the verification's side of the written form (and its filename)
    record: Callable[[Any, Conversion, list[str] | None, ExportRequest], dict]  # the format's keys of the record
    read: Callable[[Path], Any]  # the written form of an existing model file, for ``export.check``
    reconvert: Callable[[Any, Path, Any, Any, str], tuple[Conversion, dict[str, Any]]]  # the net converted as
    # the model read was (and the request options it was made with), for ``export.check``
    options: tuple[str, ...] = ()  # the ExportRequest options that apply to this format only
    without_options: str = ""  # why the options of other formats do not apply to this one
    beside: dict[str, str] = field(default_factory=dict)  # other files written beside the model: suffix -> what
    wrong_suffix: str = ""  # said after "--out FILE should end in SUFFIX"
    extra: str | None = None  # the optional extra (caffetool.extras) the format needs
    extra_hint: str = ""  # said after how to install it
    versions: tuple[str, ...] = ()  # the modules whose __version__ the record keeps
    not_served: tuple[str, ...] = ()  # record keys that, when true, make an export other than verified_export's
    ready: Callable[[ExportRequest], None] = _nothing_to_refuse  # the request's options refused before any work
    check_name: Callable[[Path], None] = _nothing_to_refuse  # a model file name the format cannot use, refused
    stem_of: Callable[[str], str] = _same  # the default model file's stem, from the weights'
    # how export.check runs a model file whose running executes it (Python): in a child, each step within
    # the seconds given; None: in this process, by ``runner``
    checked: Callable[[Any, Conversion, Path, float], AbstractContextManager[Run]] | None = None


FORMATS: dict[str, ExportFormat] = {f.name: f for f in (
    ExportFormat(
        name="onnx", title="ONNX", suffix=".onnx", record_suffix=".export.json",
        options=("opset", "batch", "with_preprocessing"), versions=("onnx", "onnxruntime"),
        not_served=("preprocessing_in_graph",),
        refusals=onnxnet.refusals, ready=onnxformat.ready, convert=onnxformat.convert, finish=onnxformat.finish,
        contents=onnxformat.contents, runner=onnxformat.runner, record=onnxformat.record, read=onnxformat.read,
        reconvert=onnxformat.reconvert),
    ExportFormat(
        name=torchformat.NAME, title="PyTorch", suffix=".py", record_suffix=torchformat.RECORD_SUFFIX,
        beside={torchformat.WEIGHTS_SUFFIX: "weights file"},
        without_options="a PyTorch module takes any batch and its preprocessing stays the caller's (see the "
                        "record's \"preprocessing\")",
        wrong_suffix=f" (--to {torchformat.NAME} writes a Python module, its weights beside it as "
                     f"NAME{torchformat.WEIGHTS_SUFFIX})",
        extra="pytorch", extra_hint=torchnet.CPU_BUILD, versions=("torch",),
        refusals=torchnet.refusals, check_name=torchformat.check_name, stem_of=torchnet.module_name,
        convert=torchformat.convert, finish=torchformat.finish, contents=torchformat.contents,
        runner=torchformat.runner, record=torchformat.record, read=torchformat.read,
        reconvert=torchformat.reconvert, checked=torchformat.checked),
)}
DEFAULT = FORMATS[DEFAULT_FORMAT]


def named(to: str) -> ExportFormat:
    """The format ``--to`` names (any case), or an error that lists them."""
    return FORMATS[choose(to, FORMATS, "--to")]


def of_file(model: Path) -> ExportFormat:
    """The format of a model file, by its suffix; ONNX for a suffix no format writes."""
    return next((f for f in FORMATS.values() if f.suffix == model.suffix), DEFAULT)


def flag(option: str) -> str:
    """How the command line names a request option: ``with_preprocessing`` -> ``--with-preprocessing``."""
    return "--" + option.replace("_", "-")


def refuse_other_options(form: ExportFormat, given: dict[str, object]) -> None:
    """Refuse the first option given (not None) that is another format's alone, naming whose it is."""
    for option, value in given.items():
        owners = [f.title for f in FORMATS.values() if option in f.options]
        if value is not None and owners and option not in form.options:
            raise ConfigError(f"{flag(option)} is for {' and '.join(owners)} exports; {form.without_options}")
