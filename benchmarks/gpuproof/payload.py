"""The GPU proof's payload, made here: everything the GPU machine needs, in four folders.

The GPU machine has no Caffe toolchain, no caffetool environment and no network, and at most
64 MiB travel per call (the checkout's own files included), so the payload is split by what each
call needs: ``common/`` (the bundle of the engine under test, the nets and solvers, the C++
tools, the allocation logger, the Python wheels the run step imports), ``data/`` (Fashion-MNIST's
IDX files, xz-compressed, for the training runs), ``baseline/`` (a second engine, carried as the
files in which it differs from the first: :mod:`gpuproof.enginediff`), ``gtest/`` (Caffe's own
test suite from a CUDA build tree) and ``pycaffe/`` (the Python 3.11 that runs pycaffe there:
:mod:`gpuproof.pyruntime`). :data:`CALLS` names the folders each call carries; the payload is
refused when a call's would not fit, or when an engine's ``caffe`` or pycaffe would load a
``libcaffe`` other than its own.
"""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from gpuproof import allocations, enginediff, pyruntime, waits
from gpuproof import nets as proof_nets

FASHION_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
PROJECT = Path(__file__).resolve().parents[2]
WORK = Path("/tmp/gpu-proof")  # where the run step unpacks and installs on the GPU machine
ENGINE_LIB = WORK / "engine" / "lib"
# What the run step imports beyond the GPU machine's own Python (3.12): caffetool's bundle
# installer, LMDB writer and log parser need these.
WHEELS = ("zstandard==0.25.0", "platformdirs==4.14.8", "lmdb==3.0.0", "pyelftools==0.33")
BASELINE = "baseline"  # the payload's folder holding the second engine
PYCAFFE = "pycaffe"  # the payload's folder holding the Python that runs pycaffe
LOGGER = Path("common") / "bin" / allocations.LIBRARY  # inside the payload
WAITS = Path("common") / "bin" / waits.LIBRARY
# The folders each call carries: the run with both engines, PyTorch and the memory record; pycaffe
# and the test suite.
CALLS: dict[str, tuple[str, ...]] = {"training,torch,memory": ("common", "data", BASELINE),
                                     "pycaffe,gtest": ("common", "gtest", PYCAFFE)}
CARRIED = 64 * 2**20  # a call's working tree and carried folders together
# zstd level of the payload's bundle: 19 makes it about a seventh smaller than caffetool's default
# of 10, room the two-engine call needs, for a minute or two more here.
LEVEL = 19


class PayloadTooLarge(Exception):
    """A call's folders and the checkout together exceed what one call carries."""


class ForeignLibrary(Exception):
    """An engine's binary or pycaffe resolves ``libcaffe`` outside the engine's own prefix."""


def prepare(prefix: Path, out: Path, fashion: Path, gtest: Path | None, baseline: Path | None = None,
            level: int = LEVEL, say=print) -> dict[str, int]:
    """Write ``out/common``, ``out/data``, (given a second engine) ``out/baseline`` and (given a
    kept test suite) ``out/gtest``, built beside ``out`` and moved into place only when every
    call's folders fit; returns each folder's size in bytes."""
    from caffetool import fsio

    with fsio.staged_dir(out) as staged:
        write_payload(staged, prefix, fashion, gtest, baseline, level, say)
        sizes = {part.name: folder_bytes(part) for part in sorted(staged.iterdir()) if part.is_dir()}
        tree = tree_bytes(PROJECT)
        for name, size in sizes.items():
            say(f"payload {out / name}: {size / 2**20:.1f} MiB")
        say(f"the checkout's own files (they travel with every call): {tree / 2**20:.1f} MiB")
        check_fits(sizes, tree)
    return sizes


def write_payload(out: Path, prefix: Path, fashion: Path, gtest: Path | None, baseline: Path | None, level: int,
                  say=print) -> None:
    from caffetool.config import cache_home
    from caffetool.engine import bundles, import_caffe, locate
    from caffetool.engine.recipe import CAFFE_SOURCE

    for engine in (prefix, baseline):
        if engine is not None:
            check_own_libcaffe(engine)
    caffe = import_caffe(locate(prefix, probe=False))  # the nets are written by the engine they run on
    common = out / "common"
    (common / "nets").mkdir(parents=True)
    made = bundles.make(prefix, common / "engine.tar.zst", level=level, say=say)
    cuda = made.cuda or {}
    say(f"bundle: {made.size / 2**20:.1f} MiB, CUDA {cuda.get('major')}, built against {cuda.get('built_against')}")
    if baseline is not None:
        pack_baseline(made.path, baseline, out / BASELINE, say)
    write_nets(caffe, common / "nets")
    for tool in TOOLS:
        build_tool(prefix, tool, common / "bin" / tool, cuda)
    allocations.build(out / LOGGER)
    waits.build(out / WAITS)
    download_wheels(common / "wheels")
    (out / "data").mkdir()
    for name in FASHION_FILES:  # xz: 4.4 MiB less than gzip, room the 64 MiB a call carries needs
        with gzip.open(fashion / name) as src, lzma.open(out / "data" / data_name(name), "wb",
                                                         preset=9 | lzma.PRESET_EXTREME) as dst:
            shutil.copyfileobj(src, dst)
    if gtest is not None:
        (out / "gtest").mkdir()
        pack_gtest(gtest, out / "gtest", cuda)
    pyruntime.pack(out / PYCAFFE, cache_home() / "sources" / CAFFE_SOURCE.orig.name, level)


def check_own_libcaffe(prefix: Path) -> None:
    """Refuse an engine whose ``caffe`` or pycaffe loads a ``libcaffe`` from elsewhere: a build
    prefix's binaries carry an absolute RUNPATH into the folder they were built for, and a later
    build there would be the library a copy of them loads."""
    from caffetool.engine import elf
    from caffetool.engine.locate import PYCAFFE_DIR

    own = (prefix / "lib").resolve()
    for binary in (prefix / "bin" / "caffe", prefix / PYCAFFE_DIR / "caffe" / "_caffe.so"):
        found = [d.path for d in elf.dependencies(binary) if d.soname.startswith("libcaffe.so") and d.path]
        if not found or found[0].resolve().parent != own:
            raise ForeignLibrary(f"{binary} loads {found[0] if found else 'no libcaffe'}, not the one in {own}: "
                                 f"point its RUNPATH at its own lib/ (patchelf --set-rpath), or install the "
                                 "engine where it was built")


def pack_baseline(first: Path, prefix: Path, folder: Path, say=print) -> None:
    """The engine at ``prefix`` as the files in which its bundle differs from ``first`` (a bundle),
    its own bundle made at zstd's fastest level only to be compared and dropped."""
    from caffetool.engine import bundles

    scratch = folder.parent / ".baseline-bundle"
    scratch.mkdir()
    try:
        second = bundles.make(prefix, scratch / "engine.tar.zst", level=1, say=lambda _: None).path
        listing = enginediff.pack(first, second, folder)
    finally:
        shutil.rmtree(scratch)
    say(f"baseline {prefix}: {len(listing['changed'])} members differ from the engine under test "
        f"({', '.join(listing['changed'][:6])}{', ...' if len(listing['changed']) > 6 else ''}), "
        f"{len(listing['removed'])} absent")


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def tree_bytes(project: Path) -> int:
    """What a call sends of the checkout itself: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "-C", str(project), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sum((project / name).lstat().st_size for name in set(listed) if name and (project / name).exists())


def check_fits(sizes: dict[str, int], tree: int, limit: int = CARRIED) -> None:
    """Refuse a payload one of whose calls (:data:`CALLS`, the folders the payload has) would carry
    more than ``limit`` bytes with the checkout's ``tree`` bytes."""
    over = []
    for call, parts in CALLS.items():
        present = [part for part in parts if part in sizes]
        if "common" not in present or len(present) == 1:
            continue  # a call this payload does not make (no data, or no test suite kept)
        total = tree + sum(sizes[part] for part in present)
        if total > limit:
            over.append(f"the {call} call carries {total / 2**20:.1f} MiB ("
                        + " + ".join(f"{part}/ {sizes[part] / 2**20:.1f}" for part in present)
                        + f" + the checkout {tree / 2**20:.1f})")
    if over:
        raise PayloadTooLarge("; ".join(over) + f", over the {limit / 2**20:.0f} MiB a call carries: build the "
                              "engines without OpenCV and for sm_90 alone (`caffetool engine.compile-check "
                              "--cuda-arch 90 --cmake-arg=-DUSE_OPENCV=OFF`)"
                              + (", or prepare without --baseline" if sizes.get(BASELINE) else ""))


def data_name(name: str) -> str:
    """The payload's file of one of Fashion-MNIST's ``.gz`` files."""
    return name.removesuffix(".gz") + ".xz"


def write_nets(caffe: Any, folder: Path) -> None:
    """Every net and solver the run step uses, and ``plan.json`` describing the memory nets."""
    pb = caffe.proto.caffe_pb2
    lenet = proof_nets.lenet(caffe)
    (folder / "lenet_cudnn.prototxt").write_text(str(lenet))
    (folder / "lenet_caffe.prototxt").write_text(str(proof_nets.set_engine(proof_nets.copy(pb, lenet),
                                                                            proof_nets.CAFFE_ENGINE)))
    for variant in ("cudnn", "caffe"):
        (folder / f"lenet_{variant}_solver.prototxt").write_text(proof_nets.lenet_solver(pb, f"lenet_{variant}.prototxt"))
    # Reproducibility and NCCL: the same seed twice, weights snapshotted at the end.
    (folder / "lenet_seeded_solver.prototxt").write_text(proof_nets.lenet_solver(
        pb, "lenet_cudnn.prototxt", max_iter=2000, seed=1, test_interval=1000, snapshot_prefix="seeded"))
    (folder / "lenet_nccl_solver.prototxt").write_text(proof_nets.lenet_solver(
        pb, "lenet_cudnn.prototxt", max_iter=1000, seed=1, test_interval=100000))

    # Where LeNet's time goes: 2,000 iterations without tests, the net varied one part at a time.
    for variant, net in proof_nets.lenet_variants(pb, lenet).items():
        (folder / f"lenet_{variant}.prototxt").write_text(str(net))
        (folder / f"lenet_{variant}_solver.prototxt").write_text(proof_nets.lenet_solver(
            pb, f"lenet_{variant}.prototxt", max_iter=2000, test_interval=100000, test_initialization=False))

    for name, batch in proof_nets.TIME_NETS:
        net, shape, classes = proof_nets.train_net(caffe, name, batch)
        timed = proof_nets.timed(pb, net, batch, shape, classes)
        (folder / f"time_{name}_cudnn.prototxt").write_text(str(timed))
        proof_nets.set_engine(timed, proof_nets.CAFFE_ENGINE)
        (folder / f"time_{name}_caffe.prototxt").write_text(str(timed))

    plan = {}
    for name, batch in proof_nets.MEMORY_NETS:
        net, shape, classes = proof_nets.train_net(caffe, name, batch)
        (folder / f"memory_{name}_cudnn.prototxt").write_text(str(net))
        proof_nets.set_engine(net, proof_nets.CAFFE_ENGINE)
        (folder / f"memory_{name}_caffe.prototxt").write_text(str(net))
        plan[name] = {"batch": batch, "shape": list(shape), "classes": classes}
    (folder / "plan.json").write_text(json.dumps(plan, indent=1))


# The payload's C++ tools (benchmarks/NAME.cpp), built against the engine they measure.
TOOLS = ("nccl_one_gpu", "gpu_host_time")


def build_tool(prefix: Path, name: str, binary: Path, cuda: dict) -> None:
    """``benchmarks/NAME.cpp`` compiled against the engine's headers and ``libcaffe``, its RUNPATH
    set to where the run step installs the engine."""
    from caffetool.engine import elf
    from caffetool.engine.compile_check import toolkit_folder

    kit = toolkit_folder()
    binary.parent.mkdir(parents=True, exist_ok=True)
    source = Path(__file__).resolve().parents[1] / f"{name}.cpp"
    subprocess.run(["g++", "-O2", "-std=c++14", "-DUSE_NCCL", "-DUSE_CUDNN", "-DUSE_LMDB", "-DUSE_LEVELDB",
                    f"-I{prefix / 'include'}", f"-I{kit / 'include'}", str(source), "-o", str(binary),
                    f"-L{prefix / 'lib'}", f"-L{kit / 'lib64'}", "-lcaffe", "-lcudart", "-lnccl", "-lglog",
                    "-lgflags", "-lprotobuf", "-lboost_system", "-lpthread"], check=True)
    elf.set_runpath(binary, [str(ENGINE_LIB), str(ENGINE_LIB / "vendor")] +
                    [str(ENGINE_LIB / f) for f in cuda["folders"]])


def download_wheels(folder: Path) -> None:
    """The run step's Python needs, as CPython 3.12 manylinux wheels (the GPU machine's Python)."""
    platforms = [arg for n in ("2_28", "2_27", "2_17", "2014", "1")
                 for arg in ("--platform", f"manylinux{'_' if '_' in n else ''}{n}_x86_64")]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(folder), *WHEELS],
                   check=True)


def pack_gtest(kept: Path, folder: Path, cuda: dict) -> None:
    """Caffe's test suite as ``engine.compile-check --test-suite`` keeps it (:func:`caffetool.engine.
    suite.keep`: the binary, the ``libcaffe`` it was linked with, the test data and the source root
    the binary reads it from) in one archive, RUNPATHs set to find the engine's vendored and CUDA
    libraries where the run step installs it."""
    import zstandard

    from caffetool.engine import elf

    source = Path((kept / "source.txt").read_text().strip())
    staged = folder / "staged"
    shutil.copytree(kept / "bin", staged / "bin")
    runpath = ["$ORIGIN", str(ENGINE_LIB / "vendor")] + [str(ENGINE_LIB / f) for f in cuda["folders"]]
    for name in ("test.testbin", "libcaffe.so.1.0.0"):
        elf.set_runpath(staged / "bin" / name, runpath)
    with open(folder / "gtest.tar.zst", "wb") as raw, zstandard.ZstdCompressor(level=19).stream_writer(raw) as zst:
        with tarfile.open(fileobj=zst, mode="w|") as tar:
            tar.add(staged / "bin", arcname="bin")
            tar.add(kept / "src", arcname=f"{source.relative_to('/')}/src")
    shutil.rmtree(staged)
    (folder / "gtest.txt").write_text(f"{source}\n")
