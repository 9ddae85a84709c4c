"""What a model declaration is, and finding the declarations in ``models/``.

The declarations shipped with caffetool live in the repository's top-level ``models/`` folder,
installed as the package ``caffetool.models``; ``model.dir`` (or ``--models-dir``) points at a
folder of one's own instead. Each ``models/<name>.py`` defines ``MODEL = Model(...)``: its
default input, transforms, batch sizes and a ``build`` function that adds the layers between the
input and the class scores to a ``caffe.NetSpec``. The train/test net and the deploy net are both
made from that one function (:mod:`caffetool.nets.builders`), so they cannot drift apart. Adding a
model is adding one file.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from caffetool.choices import choose
from caffetool.errors import ConfigError, NetError


def _shipped() -> Path:
    """The folder of the declarations that come with caffetool: the installed ``caffetool.models``,
    or, in a checkout used without installing, the ``models/`` folder beside the package."""
    try:
        return Path(str(resources.files("caffetool.models")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "models"


DEFAULT_DIR = _shipped()

# What a build function works with: a caffe.NetSpec, caffe.layers, caffe.params and the tops
# they make, pycaffe's dynamic objects, hence typed loosely; the names say which is which.
NetSpec = Layers = Params = Top = Any
# build(n, L, P, data, label, num_classes, train) -> the Top holding class scores.
# ``label`` is None in the deploy net; ``train`` is False there (no auxiliary heads).
BuildFn = Callable[[NetSpec, Layers, Params, Top, Top, int, bool], Top]


@dataclass(frozen=True)
class Model:
    name: str
    title: str
    net_name: str
    channels: int
    size: int  # input height and width
    build: BuildFn
    batch: tuple[int, int] = (64, 100)  # train, test
    transform: dict = field(default_factory=dict)  # both phases
    train_transform: dict = field(default_factory=dict)  # TRAIN only (e.g. mirror)
    mean_value: tuple[float, ...] = ()  # per channel, subtracted before scale
    crop: bool = False  # crop_size = size (data may be larger)
    data_layer_name: str = "data"
    top_k: tuple[int, ...] = (1,)
    num_classes: int = 10


def discover(directory: Path | None = None) -> dict[str, Model]:
    """All models declared in ``directory`` (default: those shipped with caffetool), by name."""
    directory = Path(directory or DEFAULT_DIR)
    if not directory.is_dir():
        raise ConfigError(f"model directory {directory} not found; set model.dir or pass --models-dir")
    found: dict[str, Model] = {}
    # Model files may share helpers (``_imagenet.py``) by a plain import from their folder.
    sys.path.insert(0, str(directory))
    try:
        for path in sorted(directory.glob("*.py")):
            if path.name.startswith("_"):
                continue
            spec = importlib.util.spec_from_file_location(f"caffetool_models.{path.stem}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as e:  # a user's declaration may fail in any way: name the file
                raise NetError(f"{path} cannot be loaded: {type(e).__name__}: {e}") from e
            model = getattr(module, "MODEL", None)
            if not isinstance(model, Model):
                raise NetError(f"{path} defines no MODEL = Model(...)")
            found[model.name] = model
    finally:
        sys.path.remove(str(directory))
    if not found:
        raise ConfigError(f"model directory {directory} holds no model declarations (*.py files that define "
                          "MODEL = Model(...)); set model.dir or pass --models-dir to such a folder")
    return found


def get(name: str, directory: Path | None = None) -> Model:
    """The model declared as ``name`` (any case) in ``directory``."""
    models = discover(directory)
    return models[choose(name, models, "--model")]
