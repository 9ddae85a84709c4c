"""What a model declaration is, and finding the declarations in ``models/``.

Each ``models/<name>.py`` defines ``MODEL = Model(...)``: its default input, transforms, batch
sizes and a ``build`` function that adds the layers between the input and the class scores to a
``caffe.NetSpec``. The train/test net and the deploy net are both made from that one function
(:mod:`caffetool.nets.build`), so they cannot drift apart. Adding a model is adding one file.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caffetool.errors import ConfigError

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "models"

# build(n, L, P, data, label, num_classes, train) -> the Top holding class scores.
# ``label`` is None in the deploy net; ``train`` is False there (no auxiliary heads).
BuildFn = Callable[[Any, Any, Any, Any, Any, int, bool], Any]


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
    """All models declared in ``directory`` (default: the project's ``models/``), by name."""
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
            spec.loader.exec_module(module)
            model = getattr(module, "MODEL", None)
            if not isinstance(model, Model):
                raise ConfigError(f"{path} defines no MODEL = Model(...)")
            found[model.name] = model
    finally:
        sys.path.remove(str(directory))
    return found


def get(name: str, directory: Path | None = None) -> Model:
    models = discover(directory)
    try:
        return models[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r} for --model; choose one of: {', '.join(models)}") from None
