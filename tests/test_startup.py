"""What ``caffetool`` needs to start: no writable home or cache folder (nothing is written, and
nothing heavy such as the upgrader's parser is imported, until a task that needs it runs), and no
optional extra (a task of an extra that is missing says how to install it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from caffetool import extras

from .test_cli import CAFFETOOL


def clean_env(**env: str) -> dict[str, str]:
    return {**{key: value for key, value in os.environ.items() if not key.startswith("INVOKE_")}, **env}


@pytest.fixture(params=["read-only folder", "regular file"])
def unwritable_home(request, tmp_path) -> Path:
    """A home and cache folder nothing can be written into (as root, a read-only folder still can be:
    the regular file is the case that holds everywhere)."""
    if request.param == "regular file":
        home = tmp_path / "home"
        home.write_text("")
    else:
        home = tmp_path / "home"
        home.mkdir()
        home.chmod(0o555)
    yield home
    if home.is_dir():
        home.chmod(0o755)


@pytest.mark.parametrize("args", [["--list"], ["--help"], ["--help", "upgrade"]])
def test_the_command_starts_with_no_writable_home_or_cache(unwritable_home, tmp_path, args):
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([str(CAFFETOOL), *args], cwd=work, capture_output=True, text=True, timeout=120,
                          env=clean_env(HOME=str(unwritable_home), XDG_CACHE_HOME=str(unwritable_home)),
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "upgrade" in done.stdout
    assert list(work.iterdir()) == [] and (unwritable_home.is_file() or list(unwritable_home.iterdir()) == [])


def test_nothing_heavy_is_imported_at_start():
    code = "import sys, caffetool.cli; print(sorted({'fissix', 'ray', 'torch', 'onnx', 'mlflow'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=clean_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_upgrade_names_the_cache_it_cannot_write_and_the_fix(tmp_path):
    cache = tmp_path / "cache"
    cache.write_text("")  # a file where the cache folder would be
    script = tmp_path / "old.py"
    script.write_text('print "hello"\n')
    done = subprocess.run([str(CAFFETOOL), "upgrade", str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=clean_env(XDG_CACHE_HOME=str(cache)), stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done
    assert done.stderr == (f"Error: upgrade keeps its Python 2 parser's grammar tables in {cache}/fissix, which cannot "
                           "be written (Not a directory): set XDG_CACHE_HOME to a writable folder, e.g. "
                           "XDG_CACHE_HOME=/tmp/cache caffetool upgrade PATH\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "old.py"]  # no copy, nothing changed
    assert script.read_text() == 'print "hello"\n'


# The core install, without the sweep extra: Ray's import fails as it does where Ray is not installed.
WITHOUT_RAY = "import sys; sys.modules['ray'] = None; from caffetool.cli import main; sys.argv[0] = 'caffetool'; main()"


@pytest.mark.parametrize("task", ["ray.start", "ray.stop"])
def test_ray_tasks_without_ray_say_how_to_install_it(tmp_path, task):
    done = subprocess.run([sys.executable, "-c", WITHOUT_RAY, task], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=clean_env(), stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done
    assert done.stderr == (f"Error: caffetool {task} needs Ray Tune and Optuna, which are not installed here: "
                           f"{extras.install_command('sweep')}\n")
    assert done.stdout == ""
