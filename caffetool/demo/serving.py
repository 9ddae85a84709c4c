"""Starting the demo server: the model is loaded (and checked) once, before the port opens.

With ``workers > 1`` uvicorn starts that many processes; each loads the model itself (nets are
not shared across processes), from the description passed in an environment variable.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import uvicorn

from caffetool.demo import model as demo_model
from caffetool.demo.server import create_app
from caffetool.engine import EngineInfo, locate

CONFIG_VARIABLE = "CAFFETOOL_DEMO_CONFIG"


def serve(engine: EngineInfo, files: demo_model.ModelFiles, backend: str, host: str, port: int,
          max_body: int, workers: int = 1) -> None:
    classifier = demo_model.load(engine, files, backend)  # fails start-up on a bad model
    print(f"serving {classifier.name} ({backend}) on http://{host}:{port}/ — Ctrl-C stops", flush=True)
    if workers <= 1:
        uvicorn.run(create_app(classifier, max_body), host=host, port=port, log_level="warning")
        return
    os.environ[CONFIG_VARIABLE] = json.dumps({
        "prefix": str(engine.prefix), "backend": backend, "max_body": max_body,
        "files": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(files).items()},
    })
    uvicorn.run("caffetool.demo.serving:app_from_environment", factory=True, host=host, port=port,
                workers=workers, log_level="warning")


def app_from_environment():
    """uvicorn worker entry point: rebuild the app from CONFIG_VARIABLE (already validated)."""
    config = json.loads(os.environ[CONFIG_VARIABLE])
    f = config["files"]
    files = demo_model.ModelFiles(**{k: (Path(v) if k in ("deploy", "weights", "labels", "mean", "run") and v else v)
                                     for k, v in f.items()})
    classifier = demo_model.load(locate(config["prefix"], probe=False), files, config["backend"], validate=False)
    return create_app(classifier, config["max_body"])
