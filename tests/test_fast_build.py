"""How the engine is compiled fast: patch 0008's unity batches (CMake run on the real patched tree),
ccache reusing a build made in another staging folder (real ccache, real compiler), ninja's and
make's progress markers."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from caffetool import apt, config
from caffetool.engine import ccache, cmake, source
from caffetool.engine.recipe import CAFFE_SOURCE, BuildOptions

ALONE = re.compile(r"set\(CAFFE_UNITY_ALONE ([^)]*)\)")


def recorded_flags(engine) -> list[str]:
    """The engine's own CMake flags, without its compiler launcher, and with this Python: the one that
    built the engine may be gone (another checkout's virtual environment)."""
    return [f"-DPYTHON_EXECUTABLE={sys.executable}" if f.startswith("-DPYTHON_EXECUTABLE=") else f
            for f in engine.manifest["cmake_flags"] if "COMPILER_LAUNCHER" not in f]


@pytest.fixture(scope="module")
def configured(tmp_path_factory, engine):
    """The engine's source with its patches, configured by CMake as engine.install configures it."""
    root = tmp_path_factory.mktemp("patched")
    tree, build = root / "src", root / "build"
    source.unpack(CAFFE_SOURCE, config.cache_home() / "sources", tree)
    source.apply_patches(tree, root / "log", BuildOptions().patches)
    flags = recorded_flags(engine)
    build.mkdir()
    subprocess.run(["cmake", "-G", "Ninja", str(tree), *flags], cwd=build, check=True, capture_output=True)
    return tree, build


def test_every_library_source_is_compiled_once_in_a_batch_or_alone(configured):
    tree, build = configured
    cmakelists = (tree / "src" / "caffe" / "CMakeLists.txt").read_text()
    alone = set(" ".join(ALONE.search(cmakelists).group(1).split()).split())
    batches = sorted((build / "src" / "caffe" / "unity").glob("batch_*.cpp"))
    included = [line.split('"')[1] for b in batches for line in b.read_text().splitlines()]
    sources = {str(p.relative_to(tree)) for p in (tree / "src" / "caffe").rglob("*.cpp") if "/test/" not in str(p)}
    assert len(included) == len(set(included))  # none twice
    assert set(included) | alone == sources and not set(included) & alone
    assert all(len(b.read_text().splitlines()) <= 8 for b in batches)
    # relative to the source root: a batch reads the same wherever the tree is unpacked
    assert all(not name.startswith("/") for name in included)
    ninja = (build / "build.ninja").read_text()
    assert all(f"unity/{b.name}" in ninja for b in batches) and "cmake_pch.hxx.gch" in ninja
    for name in alone:  # compiled by themselves
        assert f"caffe.dir/{name.removeprefix('src/caffe/')}.o" in ninja


def test_pycaffe_is_queued_before_the_tools(configured):
    """Ninja starts ready objects in the order the targets were added: _caffe.cpp (the largest
    source) before the tools' and examples' objects, not last."""
    _, build = configured
    ninja = (build / "build.ninja").read_text()
    assert (ninja.index("pycaffe.dir/caffe/_caffe.cpp.o") < ninja.index("caffe.bin.dir/caffe.cpp.o")
            < ninja.index("convert_mnist_data.dir/mnist/convert_mnist_data.cpp.o"))


def test_the_old_way_is_one_object_per_source(configured, tmp_path, engine):
    tree, _ = configured
    flags = recorded_flags(engine)
    subprocess.run(["cmake", "-G", "Ninja", str(tree), *flags, "-DCAFFE_UNITY_BUILD=OFF",
                    "-DCAFFE_PRECOMPILE_HEADERS=OFF"], cwd=tmp_path, check=True, capture_output=True)
    ninja = (tmp_path / "build.ninja").read_text()
    assert "batch_0.cpp" not in ninja and "cmake_pch" not in ninja
    assert "caffe.dir/layers/absval_layer.cpp.o" in ninja


PROJECT = """cmake_minimum_required(VERSION 3.16)
project(t CXX)
file(WRITE ${CMAKE_BINARY_DIR}/batch.cpp.in "#include \\"src/a.cpp\\"\\n#include \\"src/b.cpp\\"\\n")
configure_file(${CMAKE_BINARY_DIR}/batch.cpp.in ${CMAKE_BINARY_DIR}/batch.cpp COPYONLY)
add_library(t SHARED ${CMAKE_BINARY_DIR}/batch.cpp)
target_include_directories(t PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
target_precompile_headers(t PRIVATE <vector> <string> <t.hpp>)
"""


def _stage(folder: Path) -> tuple[Path, Path]:
    """A small project in the layout of a staging folder: src/ with a header, two sources in one batch."""
    tree, build = folder / "src", folder / "build"
    (tree / "src").mkdir(parents=True)
    (tree / "include").mkdir()
    build.mkdir()
    (tree / "CMakeLists.txt").write_text(PROJECT)
    (tree / "include" / "t.hpp").write_text("#include <vector>\nint twice(int x);\n")
    (tree / "src" / "a.cpp").write_text('#include "t.hpp"\nint twice(int x) { return 2 * x; }\n')
    (tree / "src" / "b.cpp").write_text('#include "t.hpp"\nint four(int x) { return twice(twice(x)); }\n')
    return tree, build


def test_ccache_reuses_a_build_made_in_another_staging_folder(tmp_path, monkeypatch):
    """Two builds of the same sources in folders of different random names, as two installs make
    them: the second compiles nothing (real ccache, its cache in tmp_path)."""
    apt.install_packages(["ccache", "ninja-build"])
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CCACHE_DISABLE", raising=False)
    launcher = ccache.found()
    assert launcher
    counted = []
    for name in (".engine.staging-abc123", ".engine.staging-xyz789"):
        tree, build = _stage(tmp_path / name)
        subprocess.run(["cmake", "-G", "Ninja", str(tree), *ccache.cmake_flags(launcher)], cwd=build, check=True,
                       capture_output=True)
        before = ccache.counts(launcher)
        cmake.run_step(cmake.build_command(build, 2), build, tmp_path / "log", "compilation",
                       env=ccache.environment(tmp_path / name))
        counted.append(ccache.counts(launcher) - before)
    assert counted[0].misses >= 1 and counted[0].hits == 0
    assert counted[1].misses == 0 and counted[1].hits == counted[0].misses


def test_the_users_ccache_settings_are_kept_and_ours_added(tmp_path):
    env = ccache.environment(tmp_path, {"CCACHE_SLOPPINESS": "locale", "CCACHE_DEPEND": "false",
                                        "CCACHE_DIR": "/x"})
    assert env["CCACHE_SLOPPINESS"].split(",") == ["locale", *ccache.SLOPPINESS]
    assert env["CCACHE_DEPEND"] == "false" and env["CCACHE_DIR"] == "/x"
    assert env["CCACHE_BASEDIR"] == str(tmp_path) and env["CCACHE_NOHASHDIR"] == "true"
    assert ccache.environment(tmp_path, {})["CCACHE_DEPEND"] == "true"


def test_ccache_disable_is_honoured(monkeypatch):
    monkeypatch.setenv("CCACHE_DISABLE", "1")
    assert ccache.found() is None


@pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache")
def test_a_cache_folder_that_cannot_hold_a_cache_turns_ccache_off_not_the_build(tmp_path, monkeypatch):
    """ccache is optional: a ``CCACHE_DIR`` that is a file, or a folder this user may not write,
    builds without it and says why."""
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "a-file"))
    assert ccache.found() is None
    assert ccache.unusable(shutil.which("ccache")) == f"its cache folder {tmp_path / 'a-file'} is not a folder"
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "new" / "cache"))  # made at the first compilation
    assert ccache.found() == shutil.which("ccache")


def test_ninja_and_make_progress_move_the_bar():
    class Bar:
        n = 0

        def update(self, k: int) -> None:
            self.n += k

    bar = Bar()
    for line, expected in (("[ 12%] Building CXX object x.o", 12), ("[21/42] Building CXX object y.o", 50),
                           ("warning: something", 50), ("[1/42] Linking", 50), ("[42/42] Linking", 100)):
        cmake._advance(bar, line)
        assert bar.n == expected


def test_build_command_follows_the_build_files(tmp_path):
    assert cmake.build_command(tmp_path, 3, "install") == ["make", "-j3", "install"]
    (tmp_path / "build.ninja").write_text("")
    assert cmake.build_command(tmp_path, 3) == ["ninja", "-j3"]
