"""``caffetool engine.*``: install, inspect and prove the Caffe engine."""

from __future__ import annotations

import json
import platform
from pathlib import Path

from invoke import Collection, Context

from caffetool import config
from caffetool.choices import bounded, choose, count, number, output_file, writable_folder
from caffetool.engine import cudaarch, install, locate, smoke
from caffetool.engine.bundles import ZSTD_LEVEL
from caffetool.engine.recipe import BLAS, DEFAULT_BLAS, BuildOptions, blas_name
from caffetool.errors import ConfigError
from caffetool.tasks import settings
from caffetool.tasks._common import pick, task

SIDE_PREFIX = ("pycaffe: not linked into this Python (a side prefix: `import caffe` stays with the default engine; "
               "--link-python makes it use this one)")


@task(
    name="install",
    iterable=["cmake_arg"],
    help={
        "prefix": "install prefix (default: engine.prefix, $CAFFE_ROOT, or the user data dir)",
        "source": "folder or base URL holding the two pinned source tarballs (default: apt)",
        "debian_mirror": "Debian archive URL for apt (default: the one this machine's apt uses)",
        "cuda": "build with CUDA (needs nvcc and the CUDA libraries)",
        "cudnn": "build with cuDNN (implies --cuda)",
        "nccl": "build with NCCL for multi-GPU `-gpu all` (implies --cuda)",
        "cuda_arch": "compute capabilities to build for, e.g. '80 90' or '8.0 9.0' (default: every one the "
                     "installed nvcc supports from 7.0 up, the newest also as PTX)",
        "cmake_arg": "extra CMake argument (repeatable), e.g. -DCUDA_TOOLKIT_ROOT_DIR=/opt/cuda",
        "jobs": "parallel compile jobs, 1 to 4096 (default: engine.jobs, else all cores)",
        "force": "rebuild even if an install is present",
        "bundle": "install this engine bundle (file or URL, from `engine.bundle`) instead of building",
        "sha256": "the bundle's sha256 (default: read from BUNDLE.sha256 beside it)",
        "stock": "BVLC Caffe without caffetool's tuning (serial CPU layers), e.g. in a side --prefix to compare speed",
        "blas": "BLAS library: openblas (Debian's OpenMP build) or mkl (Intel MKL from PyPI's wheels, x86-64)"
                f" (default: {DEFAULT_BLAS} for a CPU engine, openblas with --cuda)",
        "link_python": "make this Python's `import caffe` use the engine at --prefix (done anyway when --prefix "
                       "is the default engine's: engine.prefix, $CAFFE_ROOT, or the user data dir)",
        "test_suite": "also build and run Caffe's own CPU test suite (about 1,160 tests, on 1 thread and on every "
                      "core) before installing; a failure installs nothing (adds about 5 minutes on 2 cores)",
    },
)
def install_(c: Context, prefix: str | None = None, source: str | None = None, debian_mirror: str | None = None,
            cuda: bool = False, cudnn: bool = False, nccl: bool = False, cuda_arch: str = "",
            cmake_arg: list[str] | None = None, jobs: str | None = None, force: bool = False,
            bundle: str | None = None, sha256: str | None = None, stock: bool = False,
            blas: str | None = None, test_suite: bool = False, link_python: bool = False) -> None:
    """Build BVLC Caffe from Debian's pinned source and install it (idempotent), or install a bundle.

    Only the default engine (or ``--link-python``) becomes this Python's ``import caffe``: a side
    prefix (a stock engine to compare with, another BLAS) leaves it alone, so removing that prefix
    later breaks nothing."""
    workers = bounded(pick(jobs, c.engine.jobs), "--jobs", settings.JOBS)
    library = BLAS[choose(blas, BLAS, "--blas")] if blas else ""
    target = config.engine_prefix(pick(prefix, c.engine.prefix))
    writable_folder(target, "--prefix", "engine.prefix")
    link = link_python or target == config.engine_prefix(c.engine.prefix)
    if bundle:
        from caffetool.engine import bundles  # noqa: PLC0415

        done = bundles.install(bundle, target, sha256=sha256, force=force, link=link)
        for note in done.notes:
            print(f"note: {note}")
        verb = "already installed" if done.cached else "installed from"
        version = done.engine.version or done.engine.manifest["source"]["version"]  # a side prefix is not probed
        print(f"Caffe {version} {verb} {Path(bundle).name} at {done.engine.prefix} "
              f"({done.seconds:.1f} s)")
        if not link:
            print(SIDE_PREFIX)
        return
    cuda = cuda or cudnn or nccl
    if cuda and library == BLAS["mkl"]:
        raise ConfigError("--blas mkl is for CPU engines; a CUDA engine computes on the GPU and links openblas "
                          "for its CPU mode: drop --blas mkl or --cuda")
    options = BuildOptions(
        cuda=cuda, cudnn=cudnn, nccl=nccl,
        cuda_arch=cudaarch.parse(cuda_arch) if cuda else (),
        extra_cmake=tuple(cmake_arg or ()),
        stock=stock,
        blas=library,
    )
    result = install.install(
        prefix=target,
        options=options,
        source_location=pick(source, c.engine.source),
        debian_mirror=pick(debian_mirror, c.engine.debian_mirror),
        jobs=workers,
        force=force,
        test_suite=test_suite,
        link=link,
    )
    report(result, link)


def report(result: install.InstallResult, linked: bool = True) -> None:
    """One line on what install did (or found), one on pycaffe."""
    engine = result.engine
    # A side prefix is not probed (its pycaffe is not this Python's): its source names the version.
    version = engine.version or engine.manifest.get("source", {}).get("version", "")
    if result.cached:
        print(f"Caffe {version} already installed at {engine.prefix} "
              f"(checked in {result.seconds:.1f} s)")
    else:
        t = engine.manifest["timings_s"]
        print(f"Caffe {version} installed at {engine.prefix} in {result.seconds:.0f} s "
              f"(fetch {t['fetch']} s, configure {t['configure']} s, compile {t['compile']} s)")
    if not linked:
        print(SIDE_PREFIX)
        return
    print(f"pycaffe: {'imports' if engine.pycaffe else 'does not import: ' + str(engine.pycaffe_error)}")


@task(help={"prefix": "engine prefix to inspect", "json": "print the full report as JSON"})
def info(c: Context, prefix: str | None = None, json_: bool = False) -> None:
    """Show where the engine is, how it was built and what works."""
    engine = locate(pick(prefix, c.engine.prefix))
    if json_:
        print(json.dumps(engine.as_json(), indent=2))
        return
    m = engine.manifest
    print(f"prefix      {engine.prefix}")
    print(f"version     caffe {engine.version} ({m['source']['package']} {m['source']['version']})")
    print(f"mode        {'CPU only' if engine.cpu_only else 'CUDA'}"
          f"{', cuDNN' if m['options'].get('use_cudnn') else ''}{', NCCL' if m['options'].get('use_nccl') else ''}"
          f", BLAS {_blas(m)}, {'OpenMP layers' if m['options'].get('openmp') else 'serial layers'}")
    print(f"patches     {', '.join(p['name'] for p in m['patches'])}")
    for run in m.get("test_suite") or []:
        print(f"test suite  {run['passed']} of {run['tests']} of Caffe's tests passed on {run['threads']} thread(s)")
    print(f"built       {m['built_at']} in {m['timings_s']['total']} s with {m['compiler']}")
    if b := m.get("bundle"):
        print(f"from bundle {b['file']} (sha256 {b['sha256'][:16]}…), installed {b['installed_at']}, "
              f"{len(b['vendored'])} vendored libraries, glibc >= {b['glibc_floor']}")
        if b.get("cuda_libraries"):
            print(f"CUDA libs   {b['cuda_libraries']}")
    if not engine.cpu_only:
        from caffetool.engine.bundles import cuda_versions  # noqa: PLC0415

        built, running = cuda_versions(engine)
        print(f"built with  {', '.join(pin.replace('==', ' ') for pin in built) or 'the CUDA toolkit it found'}")
        print(f"running     {', '.join(f'{k} {v or chr(45)}' for k, v in running.items()) or 'the same'}")
        print(f"device code {cudaarch.describe(cudaarch.recorded(engine.prefix, m))}")
        if m["options"].get("use_cudnn"):
            from caffetool.engine import cudnnlibs  # noqa: PLC0415

            checked = cudnnlibs.check_engine(engine.prefix / "lib" / "libcaffe.so")
            print(f"cuDNN       {checked.summary() if checked else 'not linked'}")
    for name, path in engine.tools.items():
        print(f"tool        {name:28} {'ok' if path else 'missing'}")
    print(f"pycaffe     {'imports' if engine.pycaffe else 'fails: ' + str(engine.pycaffe_error)}")
    print(f"GPUs        {', '.join(engine.gpus) if engine.gpus else 'none visible'}")


def _blas(manifest: dict) -> str:
    """The BLAS by caffetool's name (``--blas``), with MKL's version where it is MKL."""
    name = blas_name(manifest["options"])
    return f"{name} {manifest['mkl']['version']}" if manifest.get("mkl") else name


@task(help={"prefix": "engine prefix", "iterations": "training iterations (default 50)"})
def check(c: Context, prefix: str | None = None, iterations: str = "50") -> None:
    """Prove the engine: a tiny real `caffe train` run whose loss must fall."""
    steps = count(iterations, "--iterations")
    engine = locate(pick(prefix, c.engine.prefix), probe=False)
    result = smoke.tiny_training(engine, iterations=steps)
    print(f"caffe train: {result.iterations} iterations in {result.seconds:.2f} s, "
          f"loss {result.first_loss:.4f} -> {result.last_loss:.4f}")


@task(name="compile-check", iterable=["cmake_arg"],
      help={"cuda_arch": "compute capabilities, e.g. '90' (default: every one the installed nvcc supports, "
                         "the newest also as PTX)",
            "jobs": "parallel compile jobs, 1 to 4096 (default: all cores)", "source": "folder or URL with the tarballs",
            "cmake_arg": "extra CMake argument (repeatable), e.g. -DUSE_OPENCV=OFF for a small bundle",
            "test_suite": "also build Caffe's test suite, run its CPU half here (everything where a GPU is) and "
                          "keep it for a GPU machine (benchmarks/gpu_proof.py)"})
def compile_check_(c: Context, cuda_arch: str = "", jobs: str | None = None,
                   source: str | None = None, cmake_arg: list[str] | None = None, test_suite: bool = False) -> None:
    """Compile-only GPU build (CUDA 13 nvcc, cuDNN 9, NCCL 2 from PyPI wheels), into a side prefix."""
    from caffetool.engine.compile_check import compile_check  # noqa: PLC0415

    workers = bounded(jobs, "--jobs", settings.JOBS)
    r = compile_check(cudaarch.parse(cuda_arch), workers, pick(source, c.engine.source),
                      tuple(cmake_arg or ()), test_suite=test_suite)
    print(f"built in {r.seconds:.0f} s into {r.prefix} (not linked into Python)")
    print(f"CUDA objects compiled: {r.cu_objects}")
    print(f"device code in libcaffe: {r.device_code}")
    print(f"caffe --version: {r.version}")
    print(f"caffe device_query -gpu 0: {r.device_query}")


@task(help={"prefix": "engine prefix to bundle", "out": "archive path (default: a descriptive name here)",
            "level": "zstd level, 1 (fast) to 22; default 10 (an MKL engine in about a minute on 2 cores; "
                     "19: smallest, several times longer)"})
def bundle(c: Context, prefix: str | None = None, out: str | None = None, level: str = str(ZSTD_LEVEL)) -> None:
    """Pack the installed engine into a relocatable, reproducible .tar.zst (with a .sha256 beside it)."""
    from caffetool.engine import bundles  # noqa: PLC0415

    zstd_level = number(level, "--level", int)
    target = output_file(out, "--out") if out else None
    r = bundles.make(pick(prefix, c.engine.prefix), target, zstd_level)
    print(f"{r.path}: {r.size / 2**20:.1f} MiB, {r.files} files, sha256 {r.sha256}, built in {r.seconds:.0f} s")
    print(f"vendored    {', '.join(r.vendored) or 'nothing'}")
    print(f"runs on     {platform.machine()} with glibc >= {r.glibc}")
    if r.cuda:
        print(f"CUDA        {r.cuda['major']} for sm_{', sm_'.join(r.cuda['arch'])}; needs {' '.join(r.cuda['requirements'])}")


ns = Collection("engine", install_, info, check, compile_check_, bundle)
