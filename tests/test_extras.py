"""The core install and its extras: caffetool installed by pip from the checkout into a fresh virtual
environment of the test's own (the project as pip builds it, no extra), where every extra's task
refuses in one line naming the command that adds it, and a training runs untracked, saying so once.
From a built wheel and from an editable checkout, the command a refusal prints is run as printed,
and the task then does its work."""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from caffetool import extras

from .test_project_cli import folder_state

ROOT = Path(__file__).resolve().parent.parent
CORE_MIB = 900  # at most half of the 1.8 GB the venv weighed with every part in the core
PIP_TIMEOUT = 1200
# What pip builds caffetool from (what docker/Dockerfile copies): a checkout's copy without its caches.
SOURCE = ("pyproject.toml", "README.md", "tasks.py", "caffetool", "models")
# The extra whose command the install tests run: the smallest (about 96 MB), with a task that needs
# no network: registering a kernel under a folder of the test's.
SMALL_EXTRA = "notebook"


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> Path:
    """A venv with caffetool's core alone, installed by pip from the checkout (not editable)."""
    return venv_with(tmp_path_factory.mktemp("core-install") / "venv", str(ROOT))


def venv_with(venv: Path, *install: str) -> Path:
    """A fresh venv at ``venv`` with ``pip install *install`` done in it."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *install],
                          capture_output=True, text=True, timeout=PIP_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv


def python_of(venv: Path) -> str:
    return shlex.quote(str(venv / "bin" / "python"))


def command(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("INVOKE_")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return subprocess.run([str(venv / "bin" / "caffetool"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)


def size_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20


def distributions_of(requirements: list[str]) -> set[str]:
    """Every distribution ``requirements`` bring, as installed here: their own requirements followed,
    with the extras they ask for (``ray[tune]``)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(text, frozenset({""})) for text in requirements]
    while todo:
        text, active = todo.pop()
        req = Requirement(text)
        if req.marker and not any(req.marker.evaluate({"extra": extra}) for extra in active):
            continue
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key not in seen:
            seen.add(key)
            todo += [(r, frozenset({"", *req.extras})) for r in importlib.metadata.requires(req.name) or []]
    return {name for name, _ in seen}


def test_each_extra_brings_the_packages_its_tasks_look_for():
    """After ``pip install -e '.[X]'`` the tasks of X find what they look for: each module an
    extra's check names comes from a distribution the extra requires (read from pyproject.toml and the
    installed packages' metadata), and ``[all]`` holds every extra."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    provided = importlib.metadata.packages_distributions()
    for name, extra in extras.EXTRAS.items():
        brought = distributions_of(declared[name])
        for module in extra.modules:
            assert {canonicalize_name(d) for d in provided[module]} & brought, (name, module, sorted(brought))
    assert distributions_of(declared["all"]) >= set().union(*(distributions_of(declared[n]) for n in extras.EXTRAS))


def test_the_core_holds_no_extra_and_weighs_at_most_half_of_everything(core):
    found = subprocess.run([str(core / "bin" / "python"), "-c", "import importlib.util, sys; print(' '.join(m for m "
                            "in sys.argv[1:] if importlib.util.find_spec(m)))",
                            *(m for extra in extras.EXTRAS.values() for m in extra.modules)],
                           capture_output=True, text=True, check=True, timeout=60)
    assert found.stdout.split() == []
    assert size_mib(core) <= CORE_MIB


REFUSALS = {
    "sweep": (("sweep", "--param", "base_lr=0.01,0.1"), "caffetool sweep"),
    "sweep.resume": (("sweep.resume", "some-sweep"), "caffetool sweep.resume"),
    "ray.start": (("ray.start",), "caffetool ray.start"),
    "track.import": (("track.import", "some-run"), "caffetool track.import"),
    "notebook.kernel": (("notebook.kernel",), "caffetool notebook.kernel"),
    "notebook.run": (("notebook.run", "notebook.ipynb"), "caffetool notebook.run"),
    "export --to pytorch": (("export", "--deploy", "deploy.prototxt", "--weights", "w.caffemodel", "--to", "pytorch"),
                            "caffetool export --to pytorch"),
}
EXTRA_OF = {"sweep": "sweep", "sweep.resume": "sweep", "ray.start": "sweep", "track.import": "mlflow",
            "notebook.kernel": "notebook", "notebook.run": "notebook", "export --to pytorch": "pytorch"}


@pytest.mark.parametrize("task", REFUSALS)
def test_a_task_whose_extra_is_missing_says_which_pip_install_adds_it_and_does_nothing(core, tmp_path, task):
    args, named = REFUSALS[task]
    for name in ("deploy.prototxt", "w.caffemodel", "notebook.ipynb"):
        (tmp_path / name).write_text("{}\n")
    before = folder_state(tmp_path)
    done = command(core, *args, cwd=tmp_path)
    extra = extras.EXTRAS[EXTRA_OF[task]]
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {named} needs {extra.brings}, which "), done.stderr
    said = f"not installed here: {python_of(core)} -m pip install '{ROOT}[{EXTRA_OF[task]}]'"
    assert lines[0].endswith(said) or f"{said} (" in lines[0], lines[0]  # PyTorch's adds where its CPU build is
    assert folder_state(tmp_path) == before


@pytest.mark.engine
def test_a_training_in_the_core_runs_untracked_and_says_so_once(core, fashion_data, tmp_path):
    done = command(core, "train", "--dataset", "fashion-mnist", "--data-dir", str(fashion_data.path.parent),
                   "--runs-dir", str(tmp_path / "runs"), "--name", "core", "--max-iter", "20", "--test-interval", "20",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    said = (done.stdout + done.stderr).count(f"is not tracked: MLflow is not installed here ({python_of(core)} -m pip "
                                             f"install '{ROOT}[mlflow]' tracks every training")
    assert said == 1, done.stdout + done.stderr
    assert (tmp_path / "runs" / "core" / "manifest.json").is_file()
    assert not (tmp_path / "runs" / "mlflow.db").exists()


def checkout_copy(folder: Path) -> Path:
    """A copy of the checkout's sources at ``folder``, as a user's checkout would hold them."""
    for name in SOURCE:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    return folder


def refused_then_added(venv: Path, tmp_path: Path) -> str:
    """Run a task of :data:`SMALL_EXTRA` in ``venv``, which refuses; run the command it printed, as
    printed, in a shell from another folder; run the task again, which now does its work. Returns the
    command."""
    task = ("notebook.kernel", "--prefix", str(tmp_path / "jupyter"))
    refused = command(venv, *task, cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    printed = refused.stderr.strip().split("not installed here: ", 1)[1]
    added = subprocess.run(printed, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=PIP_TIMEOUT)
    assert added.returncode == 0, printed + "\n" + added.stderr[-3000:]
    done = command(venv, *task, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "jupyter" / "share" / "jupyter" / "kernels" / "caffetool" / "kernel.json").is_file()
    return printed


def test_a_built_wheel_installs_and_the_refusal_names_the_wheel_that_adds_an_extra(engine, tmp_path):
    """``python -m build --wheel`` in a checkout makes the wheel; installed into a fresh venv, a task
    whose extra is missing names the wheel with the extra, and that command adds it. Once the wheel
    is gone, the refusal says so and names the checkout's command instead."""
    source = checkout_copy(tmp_path / "checkout")
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(source)],
                           capture_output=True, text=True, timeout=PIP_TIMEOUT)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("caffetool-*-py3-none-any.whl")
    venv = venv_with(tmp_path / "venv", str(wheel))
    assert refused_then_added(venv, tmp_path) == f"{python_of(venv)} -m pip install '{wheel}[{SMALL_EXTRA}]'"
    wheel.unlink()
    refused = command(venv, "ray.start", cwd=tmp_path)
    assert refused.stderr.strip().endswith(f"not installed here: {python_of(venv)} -m pip install -e '.[sweep]' in "
                                           f"caffetool's checkout ({wheel}, which it was installed from, is gone)")


def test_an_editable_checkout_names_itself_as_what_adds_an_extra(engine, tmp_path):
    """``pip install -e CHECKOUT`` into a fresh venv: a task whose extra is missing names the checkout
    with the extra, editable, and that command adds it."""
    source = checkout_copy(tmp_path / "checkout")
    venv = venv_with(tmp_path / "venv", "-e", str(source))
    assert refused_then_added(venv, tmp_path) == f"{python_of(venv)} -m pip install -e '{source}[{SMALL_EXTRA}]'"
