"""What the demo shows of its run: the manifest in brief, the metrics' last rows, the training
curves and the newest evaluation.

Everything is read from the run directory at each request, so an evaluation made while the demo
runs shows on the next reload. The newest evaluation is the ``eval/*/`` folder whose
``summary.json`` is newest (as ``caffetool evaluate`` writes them). Images are served only by
names listed from the folders themselves — a name from a request is looked up among those, never
joined to a path — so no request reaches a file outside ``plots/`` and that evaluation folder;
a link anywhere between the run's folder and an image (``plots/`` itself, ``eval/<x>/``, the file)
leaves it out, as it could point anywhere on the server.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caffetool.errors import RunError
from caffetool.runs import runrecord
from caffetool.runs.folder import NAMES, RunFolder

PNG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.png$")
PLOTS, EVALUATIONS = NAMES["plots"], NAMES["evaluations"]  # the kinds of image the run page serves, by folder
MANIFEST_KEYS = ("name", "status", "model", "iterations", "final", "timings_s", "started_at", "ended_at")


class NoRun(RunError):
    """The demo serves model files given one by one, not a run."""


class NoSuchImage(RunError):
    """A name that is not one of the run's images."""


class DamagedRun(RunError):
    """The run's manifest cannot be read: said without the server's paths, which clients need not see."""


@dataclass(frozen=True)
class EvaluationView:
    """One ``eval/<weights>/`` folder: its summary and its PNG images by name."""

    folder: Path
    summary: dict
    images: dict[str, Path]


@dataclass(frozen=True)
class RunView:
    run_dir: Path
    query: str = ""  # the model choice its links carry (``?model=NAME&version=N``) where a server has several

    def plots(self) -> dict[str, Path]:
        """The run's training curves by file name."""
        return _pngs(self.run_dir, RunFolder(self.run_dir).plots)

    def evaluation(self) -> EvaluationView | None:
        """The newest readable evaluation of the run's own data (``caffetool evaluate``), or None when
        the run has none; ``demo.classify --labelled`` results on other images (split ``images``) are
        not the run's evaluation."""
        summaries = sorted(((p.stat().st_mtime, p) for p in RunFolder(self.run_dir).evaluation_summaries()
                            if p.is_file() and _unlinked(self.run_dir, p)), reverse=True)
        for _, path in summaries:
            summary = _json(path)
            if isinstance(summary, dict) and summary.get("split") != "images":
                return EvaluationView(path.parent, summary, _pngs(self.run_dir, path.parent))
        return None

    def image(self, kind: str, name: str) -> Path:
        """The PNG ``name`` among the run's plots (``kind`` "plots") or its newest evaluation's ("eval")."""
        if kind == PLOTS:
            images = self.plots()
        else:
            evaluation = self.evaluation()
            if evaluation is None:
                raise NoSuchImage("the run has no evaluation yet: `caffetool evaluate RUN` makes one")
            images = evaluation.images
        if name not in images:
            raise NoSuchImage(f"the run has no {kind} image {name[:100]!r}"
                              + (f"; it has {', '.join(sorted(images))}" if images else ""))
        return images[name]

    def summary(self) -> dict[str, Any]:
        """The JSON of ``GET /api/run``."""
        try:
            manifest = runrecord.read(self.run_dir)
        except RunError:
            raise DamagedRun(f"the run's {NAMES['manifest']} cannot be read; `caffetool train.report` with the "
                             "run's folder, on the server, says why") from None
        out: dict[str, Any] = {key: getattr(manifest, key) for key in MANIFEST_KEYS}
        dataset = manifest.dataset
        out["dataset"] = dataset.get("name") if isinstance(dataset, dict) else dataset
        out["metrics"] = last_rows(_json(RunFolder(self.run_dir).metrics_json))
        out["plots"] = [{"name": name, "url": f"/run/{PLOTS}/{name}{self.query}"} for name in self.plots()]
        evaluation = self.evaluation()
        out["evaluation"] = None if evaluation is None else {
            **evaluation.summary, "dir": evaluation.folder.name,
            "images": [{"name": name, "url": f"/run/{EVALUATIONS}/{name}{self.query}"} for name in evaluation.images]}
        return out


def last_rows(metrics: Any) -> dict[str, Any]:
    """The last train row and the last row of each test net of a ``metrics.json``."""
    if not isinstance(metrics, dict):
        return {"train": None, "test": {}}
    train = metrics.get("train") or [None]
    tests = metrics.get("test") if isinstance(metrics.get("test"), dict) else {}
    return {"train": train[-1], "test": {net: rows[-1] for net, rows in sorted(tests.items()) if rows}}


def _pngs(run_dir: Path, folder: Path) -> dict[str, Path]:
    """The PNG files in ``folder`` reached from ``run_dir`` through no link."""
    if not folder.is_dir() or not _unlinked(run_dir, folder):
        return {}
    return {p.name: p for p in sorted(folder.iterdir()) if PNG_NAME.match(p.name) and p.is_file()
            and not p.is_symlink()}


def _unlinked(run_dir: Path, path: Path) -> bool:
    """Whether no component of ``path`` below ``run_dir`` is a symbolic link."""
    real = run_dir.resolve()
    return path.resolve() == real / path.relative_to(run_dir)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
