"""``model.list``: every declared model built (deploy net, default input) by the real engine."""

from __future__ import annotations

import tempfile
from pathlib import Path

from caffetool.engine import EngineInfo, import_caffe
from caffetool.nets import builders, check, prototxt
from caffetool.nets.declaration import discover


def list_models(engine: EngineInfo, models_dir: str | Path | None = None) -> list[dict]:
    caffe = import_caffe(engine)
    models = discover(Path(models_dir) if models_dir else None)
    with tempfile.TemporaryDirectory(prefix="caffetool-models-") as tmp:
        names = []
        for name, model in models.items():
            path = Path(tmp) / f"{name}.prototxt"
            path.write_text(prototxt.to_text(builders.deploy(caffe, model, builders.shape_of(model))))
            names.append(path.name)
        report = check.validate(engine, Path(tmp), deploy=names)["deploy"]
    rows = []
    for name, model in models.items():
        built = report[f"{name}.prototxt"]
        rows.append({"name": name, "title": model.title, "params": built["params"],
                     "layers": built["layers"], "input": f"{model.channels}x{model.size}x{model.size}"})
    return rows
