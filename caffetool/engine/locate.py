"""Find an installed engine and tell whether it works.

An install is a prefix holding ``caffetool-engine.json`` (the build manifest), ``bin/caffe``
and pycaffe under ``lib/python3/dist-packages``. Anything less is reported as corrupt, never
as installed: the manifest is written last, inside the staging tree, so only a complete build
ever carries one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType

from caffetool import config, fsio
from caffetool.engine import cpu, cpu_threads
from caffetool.engine.recipe import TUNING_PATCHES
from caffetool.errors import EngineCorrupt, EngineError, EngineNotFound
from caffetool.proc import exit_status, last_lines

MANIFEST = "caffetool-engine.json"
PYCAFFE_DIR = Path("lib/python3/dist-packages")
TOOLS: tuple[str, ...] = (
    "caffe",
    "convert_mnist_data",
    "compute_image_mean",
    "convert_imageset",
    "upgrade_net_proto_text",
    "upgrade_net_proto_binary",
    "upgrade_solver_proto_text",
    "extract_features",
)
# glog writes log files into $TMPDIR (or /tmp) unless told to log to stderr, where we read it.
QUIET_GLOG = {"GLOG_minloglevel": "2", "GLOG_logtostderr": "1"}


@dataclass
class EngineInfo:
    prefix: Path
    manifest: dict
    tools: dict[str, str | None]
    python_path: Path
    version: str | None = None
    pycaffe: bool | None = None
    pycaffe_error: str | None = None
    gpus: list[str] = field(default_factory=list)

    @property
    def caffe(self) -> Path:
        return self.prefix / "bin" / "caffe"

    def tool(self, name: str) -> Path:
        path = self.tools.get(name)
        if not path:
            raise EngineCorrupt(f"{self.prefix} has no {name} — run `caffetool engine.install --force`")
        return Path(path)

    @property
    def cpu_only(self) -> bool:
        return bool(self.manifest.get("options", {}).get("cpu_only", True))

    @property
    def tuned(self) -> bool:
        """Whether caffetool's tuning patches (the parallel CPU layers) are in this engine; its CPU
        layers then run on OpenMP threads if it was built with OpenMP (``options.openmp``)."""
        return any(p.get("name") in TUNING_PATCHES for p in self.manifest.get("patches", []))

    def record(self) -> dict:
        """What a run's manifest keeps of the engine that trained it: where, and its build manifest."""
        return {"prefix": str(self.prefix), "manifest": self.manifest}

    def as_json(self) -> dict:
        data = asdict(self)
        data["prefix"] = str(self.prefix)
        data["python_path"] = str(self.python_path)
        data["cpu_only"] = self.cpu_only
        return data


def locate(prefix: str | os.PathLike[str] | None = None, probe: bool = True, gpus: bool | None = None) -> EngineInfo:
    """Return the engine at ``prefix`` (default: config.engine_prefix()) or raise.

    ``probe`` also runs ``caffe --version`` and imports pycaffe in a child interpreter; without it
    only the files are checked (cheap, for callers that just need paths). ``gpus`` lists the
    visible GPUs into ``EngineInfo.gpus`` (by default when probing): callers that choose devices
    ask for them without paying for the probe.
    """
    root = config.engine_prefix(prefix)
    if not root.is_dir() or not any(root.iterdir()):
        raise EngineNotFound(f"no Caffe engine at {root} — run `caffetool engine.install`")
    manifest_path = root / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        raise EngineCorrupt(_corrupt(root, f"its manifest {MANIFEST} is missing")) from None
    except (OSError, ValueError) as e:
        raise EngineCorrupt(_corrupt(root, f"its manifest {MANIFEST} is unreadable ({e})")) from e
    caffe = root / "bin" / "caffe"
    if not os.access(caffe, os.X_OK):
        raise EngineCorrupt(_corrupt(root, "bin/caffe is missing or not executable"))
    if not (root / PYCAFFE_DIR / "caffe" / "__init__.py").exists():
        raise EngineCorrupt(_corrupt(root, f"pycaffe is missing from {PYCAFFE_DIR}"))
    tools = {
        name: str(root / "bin" / name) if os.access(root / "bin" / name, os.X_OK) else None
        for name in TOOLS
    }
    info = EngineInfo(prefix=root, manifest=manifest, tools=tools, python_path=root / PYCAFFE_DIR)
    if probe:
        _probe(info)
    if gpus or (gpus is None and probe):
        info.gpus = visible_gpus()
    return info


def _corrupt(root: Path, why: str) -> str:
    if caffe_source_tree(root):
        return (f"{root} is a Caffe source tree, not an engine caffetool installed; caffetool runs the engine it "
                "installs itself: unset CAFFE_ROOT (or point it at that engine) and run `caffetool engine.install`")
    if not made_by_caffetool(root):
        return (f"{root} is not an engine caffetool installed ({why}); give an empty or new folder as --prefix "
                "(engine.prefix, CAFFE_ROOT) and run `caffetool engine.install`")
    return f"{root} is not a valid Caffe engine: {why} — run `caffetool engine.install --force`"


def made_by_caffetool(root: Path) -> bool:
    """Whether ``root`` is a prefix caffetool installed (working or not): it holds the engine's manifest."""
    return (root / MANIFEST).is_file()


def caffe_source_tree(root: Path) -> bool:
    """Whether ``root`` is a Caffe checkout (BVLC's or a fork's): where ``CAFFE_ROOT`` points by
    Caffe's own convention, and never a prefix to replace."""
    return (root / "include" / "caffe" / "caffe.hpp").is_file() and (root / "src" / "caffe").is_dir()


def check_replaceable(root: Path) -> None:
    """What ``--force`` may replace at ``root``: nothing, an empty folder, or an engine caffetool
    installed; a Caffe source tree or anyone's other files are refused by name."""
    if caffe_source_tree(root):
        raise EngineError(_corrupt(root, "a source tree") + " (nothing was changed)")
    fsio.check_replaceable(root, made_by_caffetool, "an engine", error=EngineError)


def _probe(info: EngineInfo) -> None:
    env = {**os.environ, **QUIET_GLOG}
    try:
        done = subprocess.run(
            [str(info.caffe), "--version"], capture_output=True, text=True, timeout=30, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineCorrupt(_corrupt(info.prefix, f"bin/caffe does not run ({e})")) from e
    if done.returncode != 0:
        last = last_lines(done.stderr or done.stdout, 1)
        raise EngineCorrupt(_corrupt(info.prefix, f"`caffe --version` failed: {last}"))
    info.version = done.stdout.strip().removeprefix("caffe version ").strip()
    info.pycaffe, info.pycaffe_error = pycaffe_imports(info.python_path)


def pycaffe_imports(python_path: Path, python: str = sys.executable) -> tuple[bool, str | None]:
    """Whether ``import caffe`` from ``python_path`` works in ``python`` (a child process)."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); import caffe; print(caffe.__file__)"
    env = {**os.environ, **QUIET_GLOG}
    done = subprocess.run(
        [python, "-c", code, str(python_path)], capture_output=True, text=True, timeout=120, env=env
    )
    if done.returncode == 0:
        return True, None
    return False, last_lines(done.stderr, 1) if done.stderr.strip() else exit_status(done.returncode)


def visible_gpus() -> list[str]:
    """GPU names as ``nvidia-smi -L`` lists them; empty where there is no NVIDIA driver."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU ")] if done.returncode == 0 else []


def caffe_env(prefix: Path | None = None, **extra: str) -> dict[str, str]:
    """Environment for running a Caffe binary whose INFO log lines are read (glog to stderr, no log
    files), its BLAS on the kernels this CPU runs best (:mod:`caffetool.engine.cpu`), its threads
    one to a core when they use them all (:func:`caffetool.engine.cpu_threads.placement`); with the
    engine's ``prefix``, also what its Python layers import (:func:`python_layer_path`)."""
    python = {"PYTHONPATH": python_layer_path(prefix)} if prefix is not None else {}
    return {**os.environ, **cpu.blas_environment(os.environ), **cpu_threads.placement(os.environ),
            "GLOG_logtostderr": "1", "GLOG_minloglevel": "0", **python, **extra}


def python_layer_path(prefix: Path) -> str:
    """``PYTHONPATH`` for the Python inside ``caffe`` (libcaffe embeds the system's libpython, which
    knows neither pycaffe nor this environment's packages): the engine's pycaffe, then this
    interpreter's site-packages (numpy, protobuf), then the user's own ``PYTHONPATH`` — so a
    ``Python`` layer's ``import caffe`` and ``import numpy`` work in ``caffe train`` as in pycaffe."""
    import sysconfig  # noqa: PLC0415

    paths = [str(prefix / PYCAFFE_DIR), sysconfig.get_path("purelib"), sysconfig.get_path("platlib"),
             *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(paths))


def import_caffe(info: EngineInfo) -> ModuleType:
    """Import pycaffe from ``info``'s prefix in this process and return the module.

    glog and OpenBLAS read their settings from the environment when libcaffe loads, so they are
    set first: quiet, to stderr rather than into log files (for ``caffe.init_log`` callers and
    children), and the BLAS kernels this CPU runs best.
    """
    path = str(info.python_path)
    if path not in sys.path:
        sys.path.insert(0, path)
    for name, value in {**QUIET_GLOG, **cpu.blas_environment(os.environ)}.items():
        os.environ.setdefault(name, value)
    import caffe  # noqa: PLC0415 - the engine decides where pycaffe comes from

    return caffe
