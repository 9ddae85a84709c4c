"""caffetool installs with its model declarations, from a wheel as from the editable checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest
import tomllib

from caffetool.nets import declaration

from .conftest import PROJECT

SHIPPED = ["alexnet", "caffenet", "googlenet", "lenet", "vgg16"]

# Run in a fresh venv, away from the checkout: which caffetool is imported, where its models are.
WHERE = """
import caffetool
from caffetool.nets import declaration
print(caffetool.__file__)
print(declaration.DEFAULT_DIR)
print(" ".join(sorted(declaration.discover())))
"""


def test_pyproject_lists_every_package():
    listed = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = {".".join(p.parent.relative_to(PROJECT).parts)
             for p in (PROJECT / "caffetool").rglob("__init__.py")}
    assert sorted(listed) == sorted(found | {"caffetool.models"})


def test_the_checkout_install_finds_the_models_folder():
    assert declaration.DEFAULT_DIR == PROJECT / "models"
    assert sorted(declaration.discover()) == SHIPPED


@pytest.mark.slow
def test_a_wheel_installed_in_a_bare_venv_has_the_models(tmp_path):
    src = tmp_path / "src"
    for name in ("caffetool", "models"):
        shutil.copytree(PROJECT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(src)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("caffetool-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"caffetool/models/{m}.py" for m in [*SHIPPED, "_imagenet", "__init__"]} <= set(names)
    assert not [n for n in names if n.startswith("models/")]
    assert any(n.startswith("caffetool/engine/patches/") and n.endswith(".patch") for n in names)
    assert "caffetool/engine/build-packages.txt" in names  # the recipe reads it at import

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([venv / "bin" / "python", "-c", purelib], capture_output=True, text=True,
                          check=True).stdout.strip()
    installed = subprocess.run([*pip, "install", "--no-deps", "--target", site, str(wheel)],
                               capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    done = subprocess.run([venv / "bin" / "python", "-c", WHERE], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    package, models_dir, names_found = done.stdout.splitlines()
    assert package == f"{site}/caffetool/__init__.py"
    assert models_dir == f"{site}/caffetool/models"
    assert names_found.split() == SHIPPED
