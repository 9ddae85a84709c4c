"""Engines on Intel MKL (`engine.install --blas mkl`): the recipe, MKL from PyPI's wheels, the link.

The MKLROOT is assembled for real from the pinned PyPI wheels (pip checks their hashes), and a
program is linked against it the way CMake links Caffe (patch 0005's GNU-threading line) and run
from an install prefix after :func:`mkl.vendor`, with the MKLROOT gone. The MKL engine is
caffetool's engine on x86-64 (else one installed at the side prefix cpu_speed.py uses); it is compared
with an OpenBLAS engine where one is installed (the default elsewhere, or that side prefix).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from caffetool import config
from caffetool.engine import elf, mkl, source
from caffetool.engine.locate import locate
from caffetool.engine.recipe import (
    BLAS,
    BUILD_PATCHES,
    CAFFE_SOURCE,
    DEFAULT_BLAS,
    FIX_PATCHES,
    MKL_PATCHES,
    PROJECT_PATCHES,
    BuildOptions,
    cmake_flags,
)
from caffetool.errors import BuildError, EngineError

from .conftest import PROJECT

MKL = BuildOptions(blas=BLAS["mkl"])

# A BLAS product and a VML call, as Caffe makes them (caffe_cpu_gemm, caffe_add), and the threading
# layer MKL reports: the program prints C[0][0], C[63][63], a sum of vsAdd and MKL's threading layer.
PROGRAM = r"""
#include <mkl.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  static float a[64 * 64], b[64 * 64], c[64 * 64], s[64 * 64];
  for (int i = 0; i < 64 * 64; ++i) { a[i] = (float)(i % 7); b[i] = (float)(i % 5) - 2.0f; }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 64, 64, 1.0f, a, 64, b, 64, 0.0f, c, 64);
  vsAdd(64 * 64, a, b, s);
  double total = 0;
  for (int i = 0; i < 64 * 64; ++i) total += s[i];
  char version[256];
  mkl_get_version_string(version, sizeof version);
  printf("%g %g %g %s\n", c[0], c[64 * 64 - 1], total, version);
  return 0;
}
"""


def reference() -> tuple[float, float, float]:
    import numpy as np

    i = np.arange(64 * 64)
    a, b = (i % 7).astype(np.float64).reshape(64, 64), ((i % 5) - 2.0).reshape(64, 64)
    c = a @ b
    return c[0, 0], c[-1, -1], float((a + b).sum())


@pytest.fixture(scope="module")
def mklroot(tmp_path_factory) -> Path:
    return mkl.assemble(tmp_path_factory.mktemp("cache"))


# ---- the recipe -----------------------------------------------------------------------------------

def test_mkl_builds_link_mkl_on_gccs_openmp_and_openblas_builds_do_not_change(tmp_path):
    flags = cmake_flags(MKL, sys.executable, tmp_path / "prefix", tmp_path / "mkl")
    assert {"-DBLAS=MKL", f"-DMKL_ROOT={tmp_path / 'mkl'}", "-DMKL_USE_SINGLE_DYNAMIC_LIBRARY=OFF",
            "-DMKL_THREADING=GNU", "-DUSE_OPENMP=ON"} <= set(flags)
    assert not any(f.startswith("-DOpenBLAS") for f in flags)
    assert MKL.patches == PROJECT_PATCHES + MKL_PATCHES
    # a stock engine on MKL: serial layers, but MKL's GNU threading layer still needs libgomp
    stock = BuildOptions(blas=BLAS["mkl"], stock=True)
    assert stock.patches == FIX_PATCHES + BUILD_PATCHES + MKL_PATCHES  # the fixes and the faster compile only
    assert "-DUSE_OPENMP=ON" in cmake_flags(stock, sys.executable, tmp_path, tmp_path / "mkl")
    # an OpenBLAS engine is built exactly as before MKL existed
    openblas = BuildOptions(blas=BLAS["openblas"])
    flags = cmake_flags(openblas, sys.executable, tmp_path)
    assert "-DBLAS=Open" in flags and "-DUSE_OPENMP=ON" in flags and not any("MKL" in f for f in flags)
    assert openblas.patches == PROJECT_PATCHES
    # MKL where its wheels exist, the faster BLAS on the machine caffetool is measured on
    assert DEFAULT_BLAS == ("mkl" if platform.machine() == "x86_64" else "openblas")
    assert BuildOptions().blas == BLAS[DEFAULT_BLAS]
    with pytest.raises(BuildError, match="MKLROOT"):
        cmake_flags(MKL, sys.executable, tmp_path)


def test_patch_0005_makes_findmkl_pick_the_gnu_threading_libraries(mklroot, tmp_path):
    """Caffe's own FindMKL.cmake, patched, run by CMake against the assembled MKLROOT."""
    tree = tmp_path / "src"
    source.unpack(CAFFE_SOURCE, config.cache_home() / "sources", tree)
    source.apply_patches(tree, tmp_path / "patch.log", MKL.patches)
    project = tmp_path / "probe"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\nproject(probe C)\n"
        f"list(APPEND CMAKE_MODULE_PATH {tree / 'cmake' / 'Modules'})\ninclude({tree / 'cmake' / 'Utils.cmake'})\n"
        "find_package(MKL REQUIRED)\nmessage(STATUS \"MKL_LIBRARIES=${MKL_LIBRARIES}\")\n")
    found = {}
    for threading in ("GNU", "INTEL"):
        done = subprocess.run(["cmake", "-S", project, "-B", tmp_path / f"build-{threading}", f"-DMKL_ROOT={mklroot}",
                               "-DMKL_USE_SINGLE_DYNAMIC_LIBRARY=OFF", f"-DMKL_THREADING={threading}"],
                              capture_output=True, text=True)
        found[threading] = done
    gnu = found["GNU"]
    assert gnu.returncode == 0, gnu.stdout + gnu.stderr
    line = next(x for x in gnu.stdout.splitlines() if "MKL_LIBRARIES=" in x).split("=", 1)[1].split(";")
    assert line == ["-Wl,--no-as-needed", *(str(mklroot / "lib" / f"libmkl_{n}.so")
                                           for n in ("intel_lp64", "gnu_thread", "core"))]
    # BVLC's Intel threading line is untouched: it still wants libiomp5, which the wheels here lack
    assert found["INTEL"].returncode != 0
    missing = found["INTEL"].stdout + found["INTEL"].stderr
    assert "MKL_INTEL_THREAD_LIBRARY" in missing and "MKL_RTL_LIBRARY" in missing


# ---- MKL from PyPI ----------------------------------------------------------------------------------

def test_mklroot_holds_the_headers_the_runtime_and_the_links_a_linker_needs(mklroot, tmp_path):
    assert (mklroot / "include" / "mkl.h").is_file()
    assert sorted(p.name for p in (mklroot / "lib").glob("*.so.3")) == sorted(mkl.RUNTIME)
    for name in mkl.LINKED:
        plain = mklroot / "lib" / (name.split(".so.")[0] + ".so")
        assert plain.is_symlink() and plain.resolve() == (mklroot / "lib" / name).resolve()
    assert elf.soname(mklroot / "lib" / "libmkl_core.so.3") == "libmkl_core.so.3"
    # a second call finds it and downloads nothing
    stamp = (mklroot / mkl.COMPLETE).stat().st_mtime_ns
    assert mkl.assemble(mklroot.parent.parent) == mklroot
    assert (mklroot / mkl.COMPLETE).stat().st_mtime_ns == stamp


def test_a_wheel_with_another_hash_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    wheels = tuple(mkl.Wheel(w.requirement, "0" * 64) if w.requirement.startswith("mkl-include") else w
                   for w in mkl.WHEELS)
    monkeypatch.setattr(mkl, "WHEELS", wheels)
    with pytest.raises(BuildError, match="pip download of the MKL .* wheels"):
        mkl.assemble(tmp_path)
    assert not mkl.root(tmp_path).exists()
    assert [p.name for p in (tmp_path / "mkl").iterdir()] == []


def test_a_program_linked_like_caffe_runs_from_its_prefix_on_the_vendored_mkl(mklroot, tmp_path):
    """Link as CMake links libcaffe (MKLROOT in the RUNPATH), vendor, then run without the MKLROOT."""
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    program = prefix / "bin" / "probe"
    (tmp_path / "probe.c").write_text(PROGRAM)
    lib = mklroot / "lib"
    subprocess.run(["gcc", "-fopenmp", tmp_path / "probe.c", f"-I{mklroot / 'include'}", f"-L{lib}",
                    "-Wl,--no-as-needed", "-lmkl_intel_lp64", "-lmkl_gnu_thread", "-lmkl_core", "-lm",
                    f"-Wl,-rpath,{prefix / 'lib'}:{lib}", "-o", program], check=True)
    assert str(lib) in elf.runpath(program)

    assert mkl.vendor(mklroot, prefix) == list(mkl.RUNTIME)
    assert elf.runpath(program) == str(prefix / "lib")
    moved = tmp_path / "elsewhere"
    shutil.move(mklroot, moved)  # the cache may be cleared: the install must not need it
    try:
        resolved = {d.soname: d.path for d in elf.dependencies(program)}
        for name in mkl.LINKED:
            assert resolved[name] == prefix / "lib" / name
        assert "libiomp5.so" not in resolved and resolved["libgomp.so.1"] is not None
        done = subprocess.run([program], capture_output=True, text=True,
                              env={**os.environ, "MKL_VERBOSE": "1", "OMP_NUM_THREADS": "2"})
    finally:
        shutil.move(moved, mklroot)
    assert done.returncode == 0, done.stderr
    printed = [x for x in done.stdout.splitlines() if not x.startswith("MKL_VERBOSE")][-1].split(" ", 3)
    assert tuple(float(x) for x in printed[:3]) == pytest.approx(reference())
    assert printed[3].startswith(f"Intel(R) oneAPI Math Kernel Library Version {mkl.VERSION.rsplit('.', 1)[0]}")
    assert " gnu_thread" in done.stdout  # MKL_VERBOSE's first line names the threading layer


# ---- the task ------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (("--blas", "atlas"), "Error: unknown --blas 'atlas'; choose one of: openblas, mkl"),
    (("--cuda", "--blas", "mkl"), "Error: --blas mkl is for CPU engines;"),
])
def test_install_refuses_a_blas_it_cannot_build_before_building(tmp_path, argv, message):
    done = subprocess.run([sys.executable, "-m", "invoke", "engine.install", "--prefix", str(tmp_path / "e"), *argv],
                          cwd=PROJECT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith(message)
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "e").exists()


# ---- an engine built with MKL ------------------------------------------------------------------------

def engine_on(blas: str, default):
    """caffetool's engine where it is built with ``blas``, else one at the side prefix, else a skip."""
    if default.manifest["options"]["blas"] == BLAS[blas]:
        return default
    side = config.cache_home() / f"engine-{blas}"
    try:
        return locate(side)
    except EngineError:
        pytest.skip(f"no {blas} engine here (`caffetool engine.install --blas {blas} --prefix {side}` makes one)")


@pytest.fixture(scope="module")
def mkl_engine(engine):
    return engine_on("mkl", engine)


def test_the_mkl_engine_records_its_blas_and_carries_mkl(mkl_engine):
    m = mkl_engine.manifest
    assert m["options"]["blas"] == "MKL" and m["options"]["openmp"] is True
    assert m["mkl"]["version"] == mkl.VERSION
    assert [p["name"] for p in m["patches"]][-1] == MKL_PATCHES[-1]
    resolved = {d.soname: d.path for d in elf.dependencies(mkl_engine.caffe)}
    for name in mkl.LINKED:
        assert resolved[name] == mkl_engine.prefix / "lib" / name
    # OpenCV brings the system's libblas.so.3 along; Caffe's own BLAS calls must bind to MKL
    done = subprocess.run([mkl_engine.caffe, "--version"], capture_output=True, text=True,
                          env={**os.environ, "LD_BIND_NOW": "1", "LD_DEBUG": "bindings"})
    bound = {line.split("`")[1].rstrip("'"): line.split(" to ")[1].split()[0] for line in done.stderr.splitlines()
             if "binding file" in line and "libcaffe.so" in line.split(" to ")[0] and "`cblas_" in line}
    assert {"cblas_sgemm", "cblas_dgemm", "cblas_saxpy"} <= bound.keys()
    assert all(Path(lib).name == "libmkl_intel_lp64.so.3" for lib in bound.values()), bound
    assert all(str(config.cache_home() / "mkl") not in elf.runpath(p)
               for p in (mkl_engine.caffe, mkl_engine.prefix / "lib" / "libcaffe.so.1.0.0"))


def test_the_mkl_engine_trains_lenet_as_the_openblas_engine_does(mkl_engine, engine, fashion_data, tmp_path):
    """Same net, data and seed: losses within float tolerance of the OpenBLAS engine's for 200 iterations."""
    openblas = engine_on("openblas", engine)
    from caffetool import glog
    from caffetool.engine.locate import caffe_env
    from caffetool.nets import declaration, generate, solvers

    options = solvers.SolverOptions(max_iter=200, display=50, random_seed=1, snapshot=1000, test_interval=1000,
                                   mode="cpu")
    losses = {}
    for name, built in (("openblas", openblas), ("mkl", mkl_engine)):
        files = generate.generate(built, declaration.get("lenet"), fashion_data, tmp_path / name, options).files
        done = subprocess.run([built.caffe, "train", f"-solver={files[generate.SOLVER].name}"],
                              cwd=files[generate.SOLVER].parent, capture_output=True, text=True,
                              env={**caffe_env(), "OMP_NUM_THREADS": "2"}, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        losses[name] = dict(glog.losses(done.stderr))
    assert sorted(losses["mkl"]) == sorted(losses["openblas"]) == [0, 50, 100, 150, 200]
    for i, loss in losses["openblas"].items():
        assert losses["mkl"][i] == pytest.approx(loss, abs=0.02), i
    assert losses["mkl"][200] < losses["mkl"][0] / 2


def test_engine_info_names_mkl_and_its_version(mkl_engine):
    done = subprocess.run([sys.executable, "-m", "invoke", "engine.info", "--prefix", str(mkl_engine.prefix)],
                          cwd=PROJECT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"mode        CPU only, BLAS mkl {mkl.VERSION}, OpenMP layers\n" in done.stdout


FORWARD = """
import sys, numpy as np
from caffetool.engine import import_caffe, locate
caffe = import_caffe(locate(sys.argv[1]))
net = caffe.Net(sys.argv[2], caffe.TEST)
for i, (name, params) in enumerate(net.params.items()):
    for j, p in enumerate(params):
        p.data[...] = np.random.default_rng(10 * i + j).standard_normal(p.data.shape).astype(np.float32) * 0.1
net.blobs["data"].data[...] = np.random.default_rng(0).random(net.blobs["data"].data.shape, dtype=np.float32)
net.forward()
np.save(sys.argv[3], net.blobs["ip2"].data)
"""


def test_the_mkl_engine_scores_the_same_bits_on_any_thread_count(mkl_engine, caffe, tmp_path):
    """What lets `evaluate` (this process's threads) equal `caffe test` (the child's): MKL's strict
    reproducibility, which caffetool's environment turns on (without it scores differ by ~1e-5)."""
    from caffetool.nets import builders, declaration, prototxt

    m = declaration.get("lenet")
    path = tmp_path / "lenet_b64.prototxt"
    path.write_text(prototxt.to_text(builders.deploy(caffe, m, builders.shape_of(m), batch=64)))
    (tmp_path / "forward.py").write_text(FORWARD)
    scores = {}
    for threads in (1, 2):
        done = subprocess.run([sys.executable, tmp_path / "forward.py", mkl_engine.prefix, path, tmp_path / f"{threads}.npy"],
                              capture_output=True, text=True, cwd=PROJECT,
                              env={**{k: v for k, v in os.environ.items() if not k.startswith("MKL_")},
                                   "OMP_NUM_THREADS": str(threads)})
        assert done.returncode == 0, done.stderr[-2000:]
        import numpy as np

        scores[threads] = np.load(tmp_path / f"{threads}.npy")
    assert scores[1].shape == (64, 10)
    assert scores[1].tobytes() == scores[2].tobytes()
