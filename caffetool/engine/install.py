"""Install the engine: dependencies, source, patches, build, then an atomic move into place.

Everything is built inside a hidden staging folder next to the prefix (same file system, so
the final ``rename``, an exchange when ``--force`` replaces an engine, is atomic). The prefix
appears only when the build, the staged install, the manifest and a smoke test are all complete;
an interrupted or failed build leaves nothing that looks installed, and the staging folder of a
killed build is removed by the next one (:mod:`caffetool.fsio`). A second call with the same
options finds the install, checks it and returns in about a second.
"""

from __future__ import annotations

import datetime as dt
import errno
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import caffetool
from caffetool import apt, config, fsio
from caffetool.checksum import sha256_file
from caffetool.choices import nearest_existing
from caffetool.engine import ccache, cmake, cpu, cudaarch, fatbin, mkl, source, suite, userfiles
from caffetool.engine.locate import MANIFEST, EngineInfo, check_replaceable, locate, visible_gpus
from caffetool.engine.recipe import (BUILD_PACKAGES, CAFFE_SOURCE, PATCH_DIR, PYCAFFE_MODULES, BuildOptions,
                                     check_cmake_args)
from caffetool.errors import BuildError, ConfigError, EngineCorrupt, EngineError, EngineNotFound
from caffetool.proc import run_checked

PTH_NAME = "caffetool-pycaffe.pth"
# Reference prototxt files kept from the source tree: Caffe's own examples and model zoo
# definitions, which tests and users compare generated nets against.
# BVLC files installed under share/caffe: the example nets and solvers users start from, the ImageNet
# mean, and the CMake functions that turn --cuda-arch into nvcc flags (checked by the tests).
KEPT_SOURCE_FILES = ("examples/**/*.prototxt", "models/**/*.prototxt", "python/caffe/imagenet/*.npy",
                     "cmake/Cuda.cmake", "cmake/Utils.cmake")


@dataclass
class InstallResult:
    engine: EngineInfo
    cached: bool
    seconds: float
    log: Path | None


def install(
    prefix: str | os.PathLike[str] | None = None,
    options: BuildOptions = BuildOptions(),
    source_location: str | None = None,
    debian_mirror: str | None = None,
    jobs: int | None = None,
    force: bool = False,
    progress: bool = True,
    say: Callable[[str], None] = print,
    link: bool = True,
    test_suite: bool = False,
    keep_suite: Path | None = None,
) -> InstallResult:
    """Build and install the engine into ``prefix`` unless an equal working one is there.

    ``link=False`` leaves this interpreter's ``import caffe`` alone (for side builds, such as
    the compile-only CUDA check). ``test_suite`` runs Caffe's own tests on the build before it is
    installed (:mod:`caffetool.engine.suite`); ``keep_suite`` also keeps the built suite in that folder
    (a CUDA engine built where no GPU is runs its GPU half elsewhere).
    """
    started = time.monotonic()
    check_cmake_args(options.extra_cmake)
    root = config.engine_prefix(prefix)
    if options.cuda:
        options = replace(options, cuda_arch=_architectures(options))
    if force:
        check_replaceable(root)
    existing = _existing(root, options, force, say)
    if existing is not None:
        if test_suite:
            say("the engine is already installed, so no build ran Caffe's test suite: add --force to rebuild and run it")
        if not existing.pycaffe:
            ensure_pycaffe_modules(say)
            existing = locate(root)
        if not existing.pycaffe:
            raise EngineError(
                f"pycaffe in {root} does not import in {sys.executable}: {existing.pycaffe_error} "
                "— rerun with --force to rebuild it against this Python"
            )
        if link:
            link_pycaffe(existing, say)
        return InstallResult(existing, True, time.monotonic() - started, None)

    logs = config.cache_home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"engine-build-{dt.datetime.now():%Y%m%d-%H%M%S}.log"
    timings: dict[str, float] = {}
    with _timed(timings, "dependencies"):
        if installed := apt.install_packages(BUILD_PACKAGES, log):
            say(f"installed system packages: {' '.join(installed)}")
        ensure_pycaffe_modules(say)

    _check_room(root)
    try:
        with fsio.staging_folder(root) as staging:
            say(f"building Caffe {CAFFE_SOURCE.version} into {root} (log: {log})")
            manifest = _build(root, staging, options, source_location, debian_mirror, jobs, log, timings, progress,
                              test_suite, say, keep_suite)
            timings["total"] = round(time.monotonic() - started, 1)
            manifest["timings_s"] = timings
            staged = staging / "root" / root.relative_to(root.anchor)
            shutil.copyfile(log, staged / "share" / "caffetool" / "build.log")
            (staged / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            _smoke_test(staged)
            userfiles.record(staged)
            userfiles.carry_over(root, staged, say)
            fsio.move_into_place(staged, root, staging)
    except BuildError as e:  # a compiler or CMake that found no room says so in its own words
        if os.strerror(errno.ENOSPC) in str(e):
            raise EngineError(_out_of_room(root)) from None
        raise
    except OSError as e:  # unpacking, staging or moving into place; the staging folder is gone already
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise EngineError(_out_of_room(root)) from None
        raise EngineError(f"cannot build the engine in {_folder_of(root)}: {e.strerror or e} "
                          f"({e.filename or root}); nothing was installed") from None
    engine = locate(root, probe=link)
    if link:
        link_pycaffe(engine, say)
    return InstallResult(engine, False, time.monotonic() - started, log)


# The most a CPU build's staging folder held beside the prefix (source, build tree, staged install),
# sampled every second: 729 MB; the installed engine is 518 MB of it.
BUILD_ROOM_MB = 800


def _folder_of(root: Path) -> Path:
    """The folder the prefix and its staging folder are made in (the nearest that exists)."""
    return nearest_existing(root.parent)


def _free_mb(root: Path) -> int:
    return shutil.disk_usage(_folder_of(root)).free // 2**20


def _out_of_room(root: Path) -> str:
    return (f"{_folder_of(root)} ran out of room while the engine was built there ({_free_mb(root):,} MB free now; "
            f"a build needs about {BUILD_ROOM_MB:,} MB): free some space or give --prefix a folder on a larger file "
            "system (nothing was installed)")


def _check_room(root: Path) -> None:
    """Refuse a build where the file system cannot hold it, before minutes of building."""
    if (free := _free_mb(root)) < BUILD_ROOM_MB:
        raise EngineError(f"{_folder_of(root)} has {free:,} MB free; building the engine there needs about "
                          f"{BUILD_ROOM_MB:,} MB: free some space or give --prefix a folder on a larger file system "
                          "(nothing was changed)")


def _existing(root: Path, options: BuildOptions, force: bool,
              say: Callable[[str], None] = print) -> EngineInfo | None:
    """The working install at ``root`` built with ``options``; raise if another thing is there.

    An engine built from an older recipe (other project patches) is rebuilt: the patches are
    part of what the engine is.
    """
    try:
        engine = locate(root)
    except EngineNotFound:
        return None
    except EngineCorrupt as e:
        if force:
            return None
        raise EngineCorrupt(f"{e}; nothing was changed") from None
    if force:
        return None
    recorded = [(p.get("name"), p.get("sha256")) for p in engine.manifest.get("patches", [])
                if p.get("origin") == "caffetool"]
    # A patch that is no longer one of caffetool's files means an older recipe: rebuild. Current
    # patches with other options are another engine (which patches apply depends on the options).
    current = {(path.name, sha256_file(path)) for path in PATCH_DIR.glob("*.patch")}
    built = engine.manifest.get("options")
    if not set(recorded) <= current or (built == options.as_dict() and recorded != project_patches(options)):
        say(f"the engine at {root} was built with older caffetool patches; rebuilding it")
        return None
    if built != options.as_dict():
        raise ConfigError(
            f"{root} holds an engine built with other options ({json.dumps(built)}); "
            "rerun with --force to rebuild it, or choose another --prefix"
        )
    return engine


def project_patches(options: BuildOptions = BuildOptions()) -> list[tuple[str, str]]:
    return [(name, sha256_file(PATCH_DIR / name)) for name in options.patches]


def _build(
    root: Path, staging: Path, options: BuildOptions, source_location: str | None,
    debian_mirror: str | None, jobs: int | None, log: Path, timings: dict[str, float], progress: bool,
    test_suite: bool, say: Callable[[str], None], keep_suite: Path | None = None,
) -> dict:
    cache = config.cache_home() / "sources"
    tree, build_dir, destdir = staging / "src", staging / "build", staging / "root"
    with _timed(timings, "fetch"):
        origin = source.obtain(CAFFE_SOURCE, cache, source_location, debian_mirror)
    with _timed(timings, "patch"):
        source.unpack(CAFFE_SOURCE, cache, tree)
        patches = source.apply_patches(tree, log, options.patches)
    mkl_root = None
    if options.mkl:
        with _timed(timings, "mkl"):
            mkl_root = mkl.assemble(config.cache_home())
    launcher = ccache.found()
    with _timed(timings, "configure"):
        flags = cmake.configure(tree, build_dir, options, root, log, mkl_root,
                                ccache.cmake_flags(launcher) if launcher else None)
    jobs = jobs or os.cpu_count() or 1
    installed = shutil.which("ccache")
    broken = ccache.unusable(installed) if installed and not launcher else None
    say(f"compiling on {jobs} core(s) through {launcher}" if launcher else
        f"compiling on {jobs} core(s), without ccache: {broken}" if broken else
        f"compiling on {jobs} core(s); with ccache installed (`apt install ccache`) a rebuild takes seconds")
    before = ccache.counts(launcher) if launcher else None
    with _timed(timings, "compile"):
        cmake.compile_and_stage(build_dir, jobs, destdir, log, progress,
                                ccache.environment(staging) if launcher else None)
    reused = None
    if launcher and before is not None:
        counted = ccache.counts(launcher) - before
        reused = {"ccache": launcher, "hits": counted.hits, "misses": counted.misses}
        say(f"ccache: {counted.hits} of {counted.hits + counted.misses} compilations reused")
    staged = destdir / root.relative_to(root.anchor)
    device_code = _device_code(staged, options) if options.cuda else None
    if mkl_root is not None:
        mkl.vendor(mkl_root, staged)
    runs: list[suite.SuiteRun] = []
    if test_suite:
        say(f"building and running Caffe's test suite (log: {log})")
        how = suite.plan(options.cuda, options.openmp, bool(options.cuda and visible_gpus()))
        with _timed(timings, "test_suite"):
            runs = suite.run(tree, build_dir, jobs, log, {**os.environ, **cpu.blas_environment(os.environ)}, how)
        if keep_suite is not None:
            say(f"Caffe's test suite kept in {suite.keep(tree, build_dir, keep_suite)}")
        for run in runs:
            say(f"Caffe's test suite on {run.threads} thread(s): {run.passed} of {run.tests} tests passed "
                f"in {run.seconds:.0f} s")
    _keep_reference_files(tree, staged / "share" / "caffe")
    (staged / "share" / "caffetool").mkdir(parents=True, exist_ok=True)
    return {
        "schema": 1,
        "caffetool_version": caffetool.__version__,
        "source": {
            "package": CAFFE_SOURCE.package,
            "version": CAFFE_SOURCE.version,
            "suite": CAFFE_SOURCE.suite,
            "upstream_commit": CAFFE_SOURCE.upstream_commit,
            "origin": origin,
            "tarballs": [asdict(t) for t in CAFFE_SOURCE.tarballs],
        },
        "patches": [asdict(p) for p in patches],
        "options": options.as_dict(),
        "device_code": device_code.as_dict() if device_code else None,
        "mkl": {"version": mkl.VERSION, "wheels": [asdict(w) for w in mkl.WHEELS]} if options.mkl else None,
        "test_suite": [asdict(run) for run in runs] or None,
        "cmake_flags": flags,
        "ccache": reused,
        "jobs": jobs,
        "compiler": _first_line(["c++", "--version"]),
        "cmake": _first_line(["cmake", "--version"]),
        "python": {"executable": sys.executable, "version": platform.python_version()},
        "numpy": _module_version("numpy"),
        "host": {"machine": platform.machine(), "system": platform.platform(), "cpus": os.cpu_count()},
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _architectures(options: BuildOptions) -> tuple[str, ...]:
    """The architecture list a CUDA build compiles for: the one asked for, oldest first and each
    one the compiler supports, or by default every one it supports (:mod:`caffetool.engine.cudaarch`)."""
    compiler = cudaarch.nvcc(options.extra_cmake)
    if not options.cuda_arch:
        return cudaarch.default(compiler)
    return cudaarch.parse(" ".join(options.cuda_arch), compiler if compiler.exists() else None)


def _device_code(staged: Path, options: BuildOptions) -> fatbin.Architectures:
    """What the built ``libcaffe`` carries, which must be every architecture asked for, the newest
    also as PTX (BVLC's ``cmake/Cuda.cmake`` rewrites the list it is given before nvcc sees it)."""
    code = fatbin.architectures((staged / "lib" / "libcaffe.so").resolve())
    missing = [f"sm_{a}" for a in options.cuda_arch if a not in code.cubins]
    if options.cuda_arch and options.cuda_arch[-1] not in code.ptx:
        missing.append(f"PTX {options.cuda_arch[-1]}")
    if missing:
        raise BuildError(f"the CUDA build lacks device code it was asked for: {', '.join(missing)} (it carries "
                         f"{cudaarch.describe(code)}); the build log shows the nvcc flags CMake passed")
    return code


def _keep_reference_files(tree: Path, dest: Path) -> None:
    for pattern in KEPT_SOURCE_FILES:
        for path in tree.glob(pattern):
            target = dest / path.relative_to(tree)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def _smoke_test(staged: Path) -> None:
    """Run the staged ``caffe --version`` against the staged libraries before moving it in."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(staged / "lib")}
    run_checked([staged / "bin" / "caffe", "--version"], what="the freshly built `caffe --version`", error=BuildError,
                env=env)


def ensure_pycaffe_modules(say: Callable[[str], None] = print) -> None:
    """pip-install whatever pycaffe imports that this interpreter lacks."""
    missing = [pypi for module, pypi in PYCAFFE_MODULES.items() if not _has_module(module)]
    if not missing:
        return
    say(f"installing pycaffe's Python dependencies: {' '.join(missing)}")
    run_checked([sys.executable, "-m", "pip", "install", "-q", *missing], what=f"pip install {' '.join(missing)}",
                error=EngineError)


def link_pycaffe(engine: EngineInfo, say: Callable[[str], None] = print) -> Path:
    """Make ``import caffe`` work in this interpreter through a .pth file in its site-packages."""
    site = Path(sysconfig.get_path("purelib"))
    pth = site / PTH_NAME
    wanted = f"{engine.python_path}\n"
    if pth.exists() and pth.read_text() == wanted:
        return pth
    try:
        pth.write_text(wanted)
    except OSError as e:
        raise EngineError(
            f"cannot write {pth} ({e.strerror}); run the task from a virtual environment you own"
        ) from e
    say(f"pycaffe linked into {site}")
    return pth


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _module_version(name: str) -> str | None:
    try:
        return __import__(name).__version__
    except ImportError:
        return None


def _first_line(argv: list[str]) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return None


class _timed:
    """Context manager adding the seconds its block took to ``timings[key]``."""

    def __init__(self, timings: dict[str, float], key: str) -> None:
        self.timings, self.key = timings, key

    def __enter__(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.timings[self.key] = round(time.monotonic() - self.start, 1)
