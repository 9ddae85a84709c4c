"""The models one demo server serves, by name and version, each with its own batcher.

One model (``--run``, ``--deploy``) is version ``1`` of its name; a model repository
(:mod:`.repository`) gives several names and versions. Requests that name no model get the first
name; those that name no version get the name's highest. Each model version has its own batcher
(its forward passes are its own), its metrics labelled with its name and version, and, when it is a
run, its run page and test-set examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from urllib.parse import quote

from caffetool.errors import ConfigError
from caffetool.runpage import examples
from caffetool.runpage.runview import RunView
from caffetool.serving.batcher import Batcher, Batching
from caffetool.serving.classifier import Classifier
from caffetool.serving.detector import Detector
from caffetool.serving.telemetry import ServerMetrics

DEFAULT_VERSION = "1"
NO_RUN = "the demo serves model files given one by one (--deploy), not a run"


class NoSuchModel(ConfigError):
    """A model name or version this server does not serve (answered 404)."""


@dataclass(frozen=True)
class ServedModel:
    """A model (a classifier, or a detector) as served: under ``name``, version ``version``."""

    name: str
    version: str
    model: Classifier | Detector


@dataclass
class Served:
    name: str
    version: str
    model: Classifier | Detector
    batcher: Batcher
    run: RunView | None
    test_set: examples.ExampleSet | None
    no_examples: str  # why there is no test set
    no_run: str  # why there is no run to show, if there is none
    query: str  # what picks it in a link (``?model=NAME&version=N``); empty where a server has one model


class Catalog:
    def __init__(self, models: list[ServedModel], batching: Batching, metrics: ServerMetrics,
                 caffe_pb2: ModuleType | None = None) -> None:
        if not models:
            raise ConfigError("no model to serve")
        self.served: dict[tuple[str, str], Served] = {}
        several = len(models) > 1
        for m in models:
            observer = metrics.observer(m.name, m.version, m.model.load_seconds)
            run_dir = m.model.files.run if m.model.files else None
            no_run = (f"{m.name} version {m.version} is an ONNX export, not a run" if m.model.backend ==
                      "onnxruntime" and run_dir is None else NO_RUN)
            test_set, why = _examples(run_dir, caffe_pb2, no_run)
            query = choice(m.name, m.version) if several else ""
            self.served[(m.name, m.version)] = Served(
                m.name, m.version, m.model, Batcher.of(m.model.rows, batching, observer),
                RunView(Path(run_dir), query) if run_dir else None, test_set, why, no_run, query)
        self.names = list(dict.fromkeys(name for name, _ in self.served))

    def versions(self, name: str) -> list[str]:
        found = sorted((v for n, v in self.served if n == name), key=int)
        if not found:
            raise NoSuchModel(f"no model named '{name}' here; this server serves {_listed(self.names)}")
        return found

    def get(self, name: str | None = None, version: str | None = None) -> Served:
        """The model version asked for; the first model, and a model's highest version, by default."""
        name = name or self.names[0]
        versions = self.versions(name)
        version = version or versions[-1]
        if version not in versions:
            raise NoSuchModel(f"model '{name}' has no version '{version}'; its versions: {', '.join(versions)}")
        return self.served[(name, version)]

    def listing(self) -> list[dict]:
        """Each model with its versions and how it runs, for the page."""
        return [{"name": name, "versions": self.versions(name), "backend": self.get(name).model.backend}
                for name in self.names]


def choice(name: str, version: str) -> str:
    """The query that picks a model version on the page and its API."""
    return f"?model={quote(name)}&version={quote(version)}"


def _listed(names: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _examples(run_dir: Path | None, caffe_pb2: ModuleType | None,
              no_run: str) -> tuple[examples.ExampleSet | None, str]:
    """The run's test set, or None and why not."""
    if run_dir is None:
        return None, f"{no_run}: no test set to show"
    if caffe_pb2 is None:
        return None, "this server was started without Caffe's protobuf classes: no test set to show"
    try:
        return examples.for_run(Path(run_dir), caffe_pb2), ""
    except examples.NoExamples as e:
        return None, str(e)
