"""Relocatable engine bundles: build the engine once, install it anywhere in seconds.

A bundle is one ``.tar.zst`` holding an installed engine (``caffe`` and its tools, ``libcaffe``,
pycaffe for the Python it was built with, the build manifest) plus every shared library those
need except glibc's own and the NVIDIA driver's, vendored into ``lib/vendor`` the way auditwheel
repairs a wheel. That includes ``libpython``: ``libcaffe`` links it for Python layers, so without
it the ``caffe`` binary would not even start on a machine with another Python (Python layers and
``import caffe`` still need the Python version the bundle names). Every ELF file looks for its libraries through
``$ORIGIN``-relative ``RUNPATH`` entries, so the tree works wherever it is unpacked, with no
``LD_LIBRARY_PATH``. CUDA libraries are not carried: a CUDA bundle declares the NVIDIA wheels it
needs, and ``lib/nvidia`` (a link made at install time to the Python environment's ``nvidia``
package folder) is where its ``RUNPATH`` finds them.

The archive is reproducible: members sorted, owners and times fixed (to the engine's build
time), single-threaded zstd; two bundles of one install are byte-identical. Its first member,
``caffetool-bundle.json``, carries the recipe, the CPU architecture, the oldest glibc it runs on,
the CUDA, cuDNN and NCCL versions it was built against, and the sha256 of every file, so an
install can refuse an unsuitable bundle before unpacking it and check every byte after.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import io
import json
import os
import platform
import shutil
import stat
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import caffetool
from caffetool import apt, config, fsio
from caffetool.checksum import sha256_file
from caffetool.engine import cudalibs, cudnnlibs, elf, userfiles
from caffetool.engine.locate import MANIFEST, EngineInfo, check_replaceable, locate, made_by_caffetool
from caffetool.errors import (
    BundleError,
    ChecksumMismatch,
    ConfigError,
    EngineCorrupt,
    EngineError,
    EngineNotFound,
    SourceError,
)
from caffetool.proc import run_checked

BUNDLE_MANIFEST = "caffetool-bundle.json"
VENDOR = PurePosixPath("lib/vendor")
CUDA_LINK = PurePosixPath("lib/nvidia")
SUFFIX = ".tar.zst"
# zstd's level 19 makes the smallest archives (an OpenBLAS engine: about 60 MiB against 68 at level 10)
# but takes minutes on two cores where level 10 takes seconds, and an MKL engine carries 500 MiB of
# MKL's kernels (240 MB at level 10, in about a minute); the output is the same for a level on every
# machine (single-threaded compression), so any level stays reproducible.
ZSTD_LEVEL = 10
# glibc's own libraries come with every Linux system and must match its loader: never vendored.
GLIBC_SONAMES = frozenset({
    "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libresolv.so.2",
    "libutil.so.1", "libanl.so.1", "libmvec.so.1", "libBrokenLocale.so.1", "linux-vdso.so.1",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "ld-linux.so.2",
})
# Files of an install that a bundle leaves out: byte code is made anew by the Python that imports.
SKIPPED_PARTS = frozenset({"__pycache__"})


@dataclass
class BundleResult:
    path: Path
    sha256: str
    size: int
    files: int
    vendored: list[str]
    cuda: dict | None
    glibc: str
    seconds: float


# ---------------------------------------------------------------------------------------------
# making a bundle


def make(prefix: str | os.PathLike[str] | None = None, out: str | os.PathLike[str] | None = None,
         level: int = ZSTD_LEVEL, say: Callable[[str], None] = print) -> BundleResult:
    """Bundle the engine installed at ``prefix`` into ``out`` (default: a name saying what it is)."""
    if not 1 <= level <= 22:
        raise ConfigError(f"--level {level}: zstd levels run from 1 (fastest) to 22 (smallest)")
    started = time.monotonic()
    engine = locate(prefix, probe=False)
    files = _install_files(engine.prefix)
    elves = [rel for rel, path in files.items() if elf.is_elf(path)]
    if not elves:
        raise EngineCorrupt(f"{engine.prefix} holds no ELF files; it is not a built engine")
    vendored, cuda_needed = _closure(engine.prefix, [files[rel] for rel in elves])
    cuda = _cuda_section(engine, cuda_needed)
    target = (Path(out) if out else Path.cwd() / default_name(engine, cuda)).absolute()
    with fsio.staging_folder(target) as staging:
        tree = staging / "tree"
        _stage(files, vendored, tree)
        staged_elves = [tree / rel for rel in elves] + [tree / VENDOR / name for name in vendored]
        for path in staged_elves:
            elf.set_runpath(path, _runpath_for(tree, path, cuda))
        manifest = _manifest(engine, tree, vendored, cuda, elf.glibc_floor(staged_elves))
        archive = _write_archive(tree, manifest, target, _epoch(engine), level)
    digest = sha256_file(archive)
    fsio.write_atomic(archive.with_name(archive.name + ".sha256"), f"{digest}  {archive.name}\n", BundleError)
    say(f"bundled {len(manifest['files'])} files ({len(vendored)} vendored libraries) into {archive}")
    return BundleResult(archive, digest, archive.stat().st_size, len(manifest["files"]), sorted(vendored),
                        cuda, manifest["glibc_floor"], time.monotonic() - started)


def default_name(engine: EngineInfo, cuda: dict | None) -> str:
    version = engine.manifest.get("source", {}).get("version", "unknown").replace("+", "_")
    kind = f"cuda{cuda['major']}-sm{'-'.join(cuda['arch'])}" if cuda else "cpu"
    return f"caffe-{version}-{kind}-{platform.machine()}{SUFFIX}"


def _install_files(prefix: Path) -> dict[PurePosixPath, Path]:
    """The install's files and links by path inside it, without byte code or a CUDA link."""
    found = {}
    for path in sorted(prefix.rglob("*")):
        rel = PurePosixPath(path.relative_to(prefix).as_posix())
        if SKIPPED_PARTS & set(rel.parts) or rel == CUDA_LINK or CUDA_LINK in rel.parents:
            continue
        if path.is_symlink() or path.is_file():
            found[rel] = path
    return found


def _closure(prefix: Path, elves: list[Path]) -> tuple[dict[str, Path], set[str]]:
    """Libraries to vendor (soname -> file) and the CUDA sonames the engine needs."""
    own = {p.name for p in prefix.rglob("*.so*")}
    vendored: dict[str, Path] = {}
    cuda: set[str] = set()
    missing: dict[str, Path] = {}
    for path in elves:
        for dep in elf.dependencies(path, [prefix / "lib"]):
            name = dep.soname
            if name in GLIBC_SONAMES or name in cudalibs.DRIVER_SONAMES:
                continue
            if cudalibs.is_cuda_soname(name):
                cuda.add(name)
            elif name in own:
                continue
            elif dep.path is None:
                missing.setdefault(name, path)
            else:
                vendored.setdefault(name, dep.path.resolve())
    if missing:
        listed = ", ".join(f"{name} (needed by {path.name})" for name, path in sorted(missing.items()))
        raise BundleError(f"cannot bundle: the loader does not find {listed}; install the package providing it")
    return vendored, cuda


def _cuda_section(engine: EngineInfo, needed: set[str]) -> dict | None:
    major = cudalibs.cuda_major(needed)
    if engine.cpu_only or major is None:
        return None
    libraries = []
    for soname in sorted(needed):
        lib = cudalibs.library(major, soname)
        if lib is None:
            raise BundleError(f"the engine needs {soname}, which no CUDA {major} wheel declared in "
                              "caffetool/engine/cudalibs.py provides")
        libraries.append({"soname": soname, "wheel": lib.wheel, "folder": lib.folder})
    built_against = engine.manifest.get("cuda_wheels", _kit_wheels(engine))
    requirements = sorted({cudalibs.requirement(cudalibs.library(major, s), built_against) for s in needed})
    options = engine.manifest.get("options", {})
    return {
        "major": major,
        "arch": list(options.get("cuda_arch", [])),
        "cudnn": bool(options.get("use_cudnn")),
        "nccl": bool(options.get("use_nccl")),
        "built_against": built_against,
        "libraries": libraries,
        "requirements": requirements,
        "folders": sorted({lib["folder"] for lib in libraries}),
    }


def cuda_versions(engine: EngineInfo) -> tuple[list[str], dict[str, str | None]]:
    """The CUDA library wheels a GPU engine was built against (``name==version``) and those it runs
    with: for an engine installed from a bundle, the wheels of this Python its ``lib/nvidia`` link
    finds; for one built here, the toolkit folder it was built against."""
    installed = engine.manifest.get("bundle") or {}
    if installed.get("cuda_requirements"):
        names = [req.partition(">=")[0] for req in installed["cuda_requirements"]]
        return installed.get("cuda_built_against") or [], cudalibs.installed(names)
    built = engine.manifest.get("cuda_wheels", _kit_wheels(engine))
    return built, {pin.partition("==")[0]: pin.partition("==")[2] for pin in built}


def _kit_wheels(engine: EngineInfo) -> list[str]:
    """The CUDA wheels the compile toolkit folder was assembled from, if the build used one."""
    for flag in engine.manifest.get("cmake_flags", []):
        if flag.startswith("-DCUDA_TOOLKIT_ROOT_DIR="):
            complete = Path(flag.split("=", 1)[1]) / ".complete"
            if complete.exists():
                return complete.read_text().split()
    return []


def _stage(files: dict[PurePosixPath, Path], vendored: dict[str, Path], tree: Path) -> None:
    for rel, path in files.items():
        dest = tree / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            link = os.readlink(path)
            if os.path.isabs(link):
                raise BundleError(f"{path} links to the absolute path {link}; a bundle can only carry "
                                  "links inside the install")
            os.symlink(link, dest)
        else:
            shutil.copyfile(path, dest)
            os.chmod(dest, 0o755 if os.access(path, os.X_OK) else 0o644)
    (tree / VENDOR).mkdir(parents=True, exist_ok=True)
    for name, path in vendored.items():
        shutil.copyfile(path, tree / VENDOR / name)
        os.chmod(tree / VENDOR / name, 0o755)


def _runpath_for(tree: Path, path: Path, cuda: dict | None) -> list[str]:
    """``$ORIGIN``-relative entries for the engine's libraries, the vendored ones and the CUDA wheels."""
    here = path.parent
    targets = [tree / "lib", tree / VENDOR] + [tree / CUDA_LINK / PurePosixPath(f).relative_to("nvidia")
                                               for f in (cuda or {}).get("folders", [])]
    entries = []
    for target in targets:
        rel = os.path.relpath(target, here)
        entry = "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"
        if entry not in entries:
            entries.append(entry)
    return entries


def _manifest(engine: EngineInfo, tree: Path, vendored: dict[str, Path], cuda: dict | None, glibc: str) -> dict:
    files = {}
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            files[path.relative_to(tree).as_posix()] = sha256_file(path)
    build = engine.manifest
    return {
        "schema": 1,
        "caffetool_version": caffetool.__version__,
        "engine": {
            "version": build.get("source", {}).get("version"),
            "source": build.get("source"),
            "patches": build.get("patches"),
            "options": build.get("options"),
            "cmake_flags": build.get("cmake_flags"),
            "built_at": build.get("built_at"),
        },
        "machine": platform.machine(),
        "glibc_floor": glibc,
        "python": ".".join(build.get("python", {}).get("version", "").split(".")[:2]) or None,
        "cuda": cuda,
        "vendored": _origins(vendored),
        "files": files,
    }


def _origins(vendored: dict[str, Path]) -> dict[str, str]:
    """Where each vendored library came from: its Debian package and version where dpkg knows it,
    else its path."""
    packages = apt.owners(list(vendored.values()))
    return {name: f"{packages[path]} ({path.name})" if path in packages else str(path)
            for name, path in sorted(vendored.items())}


def _epoch(engine: EngineInfo) -> int:
    built = engine.manifest.get("built_at")
    try:
        return int(dt.datetime.fromisoformat(built).timestamp())
    except (TypeError, ValueError):
        return 0


def _write_archive(tree: Path, manifest: dict, target: Path, mtime: int, level: int) -> Path:
    """Write the reproducible ``.tar.zst``: the manifest first, then every entry sorted by path."""
    import zstandard  # noqa: PLC0415

    compressor = zstandard.ZstdCompressor(level=level, write_checksum=True)
    with (fsio.atomic_file(target, BundleError) as part, open(part, "wb") as raw,
          compressor.stream_writer(raw, closefd=False) as zst,
          tarfile.open(fileobj=zst, mode="w|", format=tarfile.PAX_FORMAT) as tar):
        data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
        tar.addfile(_member(BUNDLE_MANIFEST, tarfile.REGTYPE, 0o644, mtime, len(data)), io.BytesIO(data))
        for path in _walk(tree):
            _add(tar, path, path.relative_to(tree).as_posix(), mtime)
    return target


def _add(tar: tarfile.TarFile, path: Path, name: str, mtime: int) -> None:
    """One entry with fixed owner and time: a link as a link, a folder, or a file's bytes."""
    if path.is_symlink():
        info = _member(name, tarfile.SYMTYPE, 0o777, mtime)
        info.linkname = os.readlink(path)
        tar.addfile(info)
    elif path.is_dir():
        tar.addfile(_member(name, tarfile.DIRTYPE, 0o755, mtime))
    else:
        mode = 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644
        with open(path, "rb") as f:
            tar.addfile(_member(name, tarfile.REGTYPE, mode, mtime, path.stat().st_size), f)


def _walk(tree: Path) -> Iterator[Path]:
    yield from sorted(tree.rglob("*"), key=lambda p: p.relative_to(tree).as_posix())


def _member(name: str, kind: bytes, mode: int, mtime: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.size = kind, mode, mtime, size
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# ---------------------------------------------------------------------------------------------
# installing a bundle


@dataclass
class BundleInstall:
    engine: EngineInfo
    cached: bool
    seconds: float
    notes: list[str]


def install(bundle: str, prefix: str | os.PathLike[str] | None = None, sha256: str | None = None,
            force: bool = False, link: bool = True, pip: bool = True,
            say: Callable[[str], None] = print) -> BundleInstall:
    """Verify ``bundle`` (a file or URL), check it suits this machine, install it atomically."""
    started = time.monotonic()
    root = config.engine_prefix(prefix)
    archive = _obtain(bundle)
    expected = (sha256 or _sibling_sha256(bundle)).lower()
    found = sha256_file(archive)
    if found != expected:
        raise ChecksumMismatch(f"{bundle} has sha256 {found}, expected {expected}; the copy is corrupt "
                               "or not the bundle you meant")
    manifest = read_manifest(archive)
    notes = check_suitable(manifest)
    if force:
        check_replaceable(root)
    current = None if force else _current(root)
    if current is not None and current.manifest.get("bundle", {}).get("sha256") == found and not force:
        if link:
            _link(current, manifest, notes, say)
        return BundleInstall(current, True, time.monotonic() - started, notes)
    if current is not None and not force:
        raise ConfigError(f"{root} already holds an engine; pass --force to replace it with {Path(bundle).name}, "
                          "or choose another --prefix")
    cuda_dir = _cuda_libraries(manifest["cuda"], pip, say) if manifest.get("cuda") else None
    cudnn = _cudnn_loads(manifest["cuda"], cuda_dir) if cuda_dir is not None else None
    with fsio.staged_dir(root) as tree:
        _extract(archive, tree, manifest)
        if cuda_dir is not None:
            os.symlink(cuda_dir, tree / CUDA_LINK)
        build = json.loads((tree / MANIFEST).read_text())
        build["bundle"] = {"file": Path(bundle).name, "sha256": found, "glibc_floor": manifest["glibc_floor"],
                           "vendored": sorted(manifest["vendored"]), "cuda_libraries": str(cuda_dir) if cuda_dir else None,
                           "cuda_built_against": (manifest.get("cuda") or {}).get("built_against"),
                           "cuda_requirements": (manifest.get("cuda") or {}).get("requirements"),
                           "cudnn": cudnn.summary() if cudnn else None,
                           "installed_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
        (tree / MANIFEST).write_text(json.dumps(build, indent=2) + "\n")
        _smoke(tree)
        userfiles.record(tree)
        userfiles.carry_over(root, tree, say)
    engine = locate(root, probe=link)
    if link:
        _link(engine, manifest, notes, say)
    return BundleInstall(engine, False, time.monotonic() - started, notes)


def _link(engine: EngineInfo, manifest: dict, notes: list[str], say: Callable[[str], None]) -> None:
    """This Python's ``import caffe`` made the bundle's pycaffe, when the bundle's Python is this one."""
    from caffetool.engine.install import link_pycaffe  # noqa: PLC0415

    if manifest.get("python") == f"{sys.version_info.major}.{sys.version_info.minor}":
        link_pycaffe(engine, say)
    else:
        notes.append(f"pycaffe in this bundle is for Python {manifest.get('python')}, not "
                     f"{sys.version_info.major}.{sys.version_info.minor}: the tools run, `import caffe` does not")


def _obtain(bundle: str) -> Path:
    if "://" not in bundle:
        path = Path(bundle).expanduser()
        if not path.is_file():
            raise SourceError(f"no bundle at {path}; make one with `caffetool engine.bundle`")
        return path.absolute()
    from caffetool.download import download  # noqa: PLC0415

    cache = config.cache_home() / "bundles"
    cache.mkdir(parents=True, exist_ok=True)
    return download(bundle, cache / bundle.rstrip("/").rsplit("/", 1)[-1], verify=lambda _: None)


def _sibling_sha256(bundle: str) -> str:
    """The digest from ``BUNDLE.sha256`` (as ``sha256sum`` writes it), beside the file or the URL."""
    where = bundle + ".sha256"
    try:
        if "://" in bundle:
            from caffetool.download import download  # noqa: PLC0415

            with tempfile.TemporaryDirectory(prefix="caffetool-sha256-") as tmp:
                text = download(where, Path(tmp) / "sha256", progress=False).read_text("ascii", "replace")
        else:
            text = Path(where).expanduser().read_text("ascii", "replace")
    except (OSError, ValueError, SourceError) as e:
        raise SourceError(f"no checksum for {bundle}: {where} cannot be read ({e}); pass --sha256 DIGEST") from e
    digest = text.split()[0] if text.split() else ""
    if len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
        raise SourceError(f"{where} does not hold a sha256 digest; pass --sha256 DIGEST")
    return digest


def read_manifest(archive: Path) -> dict:
    """The bundle manifest, read from the archive's first member without unpacking the rest."""
    import zstandard  # noqa: PLC0415

    try:
        with _open_tar(archive) as tar:
            first = tar.next()
            if first is None or first.name != BUNDLE_MANIFEST:
                raise EngineCorrupt(f"{archive} is not a caffetool engine bundle (no {BUNDLE_MANIFEST} first)")
            return json.loads(tar.extractfile(first).read())
    except (tarfile.TarError, zstandard.ZstdError, ValueError, OSError, EOFError) as e:
        raise EngineCorrupt(f"{archive} is not a readable engine bundle ({e})") from e


def check_suitable(manifest: dict) -> list[str]:
    """Refuse a bundle this machine cannot run, naming why; return notes on what it can."""
    machine = platform.machine()
    if manifest.get("machine") != machine:
        raise BundleError(f"the bundle was built for {manifest.get('machine')} CPUs; this machine is {machine}: "
                          f"build a bundle on a {machine} machine")
    floor, here = manifest.get("glibc_floor", "0"), elf.host_glibc()
    if elf.version_tuple(floor) > elf.version_tuple(here):
        raise BundleError(f"the bundle needs glibc {floor} or newer; this machine has {here}: build the bundle "
                          "on an older distribution (its glibc is the floor)")
    notes = []
    cuda = manifest.get("cuda")
    if cuda:
        driver = driver_cuda_version()
        if driver is None:
            notes.append(f"no NVIDIA driver here: this CUDA {cuda['major']} engine runs on the CPU only")
        elif driver[0] < cuda["major"]:
            raise BundleError(f"the NVIDIA driver here serves CUDA up to {driver[0]}.{driver[1]}; the bundle needs "
                              f"CUDA {cuda['major']}: update the driver, or use a CUDA {driver[0]} bundle")
    return notes


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA version the installed NVIDIA driver serves, or None without a driver."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return version.value // 1000, (version.value % 1000) // 10


def _cuda_libraries(cuda: dict, pip: bool, say: Callable[[str], None]) -> Path:
    """The ``site-packages/nvidia`` folder holding every CUDA library the bundle needs (pip-installing
    the declared wheels into this Python when they are missing)."""
    found = find_cuda_folder(cuda)
    old = cudalibs.too_old(cuda["requirements"]) if found is not None else []
    if found is not None and not old:
        return found
    if old and not pip:
        raise EngineError(f"this bundle was built against newer CUDA libraries than {sys.executable} has: "
                          f"{'; '.join(old)}; pip install -U {' '.join(repr(r) for r in cuda['requirements'])}")
    if old:
        say(f"upgrading CUDA wheels older than the bundle was built against: {'; '.join(old)}")
        run_checked([sys.executable, "-m", "pip", "install", "-q", "-U", *cuda["requirements"]],
                    what=f"pip install -U {' '.join(cuda['requirements'])}", error=EngineError)
        return find_cuda_folder(cuda) or found
    if not pip:
        raise EngineError(f"the CUDA libraries this bundle needs are not installed in {sys.executable}: "
                          f"pip install {' '.join(cuda['requirements'])}")
    say(f"installing the CUDA wheels the bundle declares: {' '.join(cuda['requirements'])}")
    run_checked([sys.executable, "-m", "pip", "install", "-q", *cuda["requirements"]],
                what=f"pip install {' '.join(cuda['requirements'])}", error=EngineError)
    found = find_cuda_folder(cuda)
    if found is None:
        raise EngineError(f"after installing {' '.join(cuda['requirements'])} the libraries "
                          f"{', '.join(lib['soname'] for lib in cuda['libraries'])} are still not all present")
    return found


def _cudnn_loads(cuda: dict, cuda_dir: Path) -> cudnnlibs.CudnnCheck | None:
    """cuDNN's sub-libraries beside the ``libcudnn`` the bundle needs, each resolving
    (:mod:`caffetool.engine.cudnnlibs`); refused before anything is installed where one is missing."""
    lib = next((lib for lib in cuda["libraries"] if lib["soname"].startswith("libcudnn.so.")), None)
    if lib is None:
        return None
    major = int(lib["soname"].rsplit(".", 1)[1])
    check = cudnnlibs.check_folder(cuda_dir.parent / lib["folder"], major)
    if not check.ok:
        wheel = next((r for r in cuda["requirements"] if r.startswith("nvidia-cudnn")), "nvidia-cudnn-cu13")
        raise EngineError(f"cuDNN {major} would fail at its first convolution on a GPU "
                          f"(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED): {check.summary()}; reinstall it: "
                          f"pip install --force-reinstall '{wheel}'")
    return check


def find_cuda_folder(cuda: dict) -> Path | None:
    """The first ``nvidia`` package folder on this Python's path that holds every library ``cuda`` lists."""
    roots = [Path(p) for p in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *sys.path) if p]
    for root in dict.fromkeys(roots):
        folder = root / "nvidia"
        if folder.is_dir() and all((root / lib["folder"] / lib["soname"]).exists() for lib in cuda["libraries"]):
            return folder.resolve()
    return None


def _current(root: Path) -> EngineInfo | None:
    """The engine at ``root``, None for an empty place; something else there is refused."""
    try:
        return locate(root, probe=False)
    except EngineNotFound:
        return None
    except EngineCorrupt as e:
        hint = " (pass --force to replace it)" if made_by_caffetool(root) else ""
        raise EngineCorrupt(f"{e}; nothing was changed{hint}") from None


def _extract(archive: Path, tree: Path, manifest: dict) -> None:
    """Unpack every member after the manifest into ``tree``, refusing anything that would land outside
    it, then check each file against the manifest's sha256."""
    import zstandard  # noqa: PLC0415

    tree.mkdir(parents=True, exist_ok=True)
    try:
        _unpack_members(archive, tree)
    except (tarfile.TarError, zstandard.ZstdError, EOFError) as e:
        raise EngineCorrupt(f"{archive} is damaged ({e}); fetch the bundle again") from e
    listed = manifest.get("files", {})
    present = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file() and not p.is_symlink()}
    if present != set(listed):
        extra, lost = sorted(present - set(listed)), sorted(set(listed) - present)
        raise EngineCorrupt(f"{archive}: files differ from its manifest (unlisted {extra[:3]}, missing {lost[:3]})")
    for rel, digest in listed.items():
        if sha256_file(tree / rel) != digest:
            raise EngineCorrupt(f"{archive}: {rel} does not match the sha256 in its manifest; the bundle is corrupt")


def _unpack_members(archive: Path, tree: Path) -> None:
    """Write every member after the manifest below ``tree``; nothing may land outside it."""
    with _open_tar(archive) as tar:
        tar.next()  # the manifest, read already
        while (member := tar.next()) is not None:
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise EngineCorrupt(f"{archive}: member {member.name} points outside the install; refusing it")
            dest = tree / name
            if member.isdir():
                dest.mkdir(parents=True, exist_ok=True)
            elif member.issym():
                target = (dest.parent / member.linkname).resolve()
                if PurePosixPath(member.linkname).is_absolute() or not target.is_relative_to(tree.resolve()):
                    raise EngineCorrupt(f"{archive}: link {member.name} points outside the install; refusing it")
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(member.linkname, dest)
            elif member.isfile():
                dest.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                os.chmod(dest, member.mode & 0o755)
            else:
                raise EngineCorrupt(f"{archive}: member {member.name} is not a file, folder or link; refusing it")


def _open_tar(archive: Path) -> tarfile.TarFile:
    import zstandard  # noqa: PLC0415

    stream = zstandard.ZstdDecompressor().stream_reader(open(archive, "rb"), closefd=True)
    return tarfile.open(fileobj=stream, mode="r|")


def _smoke(tree: Path) -> None:
    """The unpacked ``caffe --version`` must run with no library path set: the proof it is relocatable."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    run_checked([tree / "bin" / "caffe", "--version"], what="the bundle's `caffe --version` on this machine",
                error=EngineCorrupt, env=env)
