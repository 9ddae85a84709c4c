"""The GPU proof's payload, made here: everything the GPU machine needs, in three folders.

The GPU machine has no Caffe toolchain, no caffetool environment and no network, and at most
64 MiB travel per call, so the payload is split by what each call needs: ``common/`` (the CUDA
engine bundle, the nets and solvers, the NCCL check binary, the Python wheels the run step
imports), ``data/`` (Fashion-MNIST's IDX files, xz-compressed, for the training runs) and ``gtest/`` (Caffe's own
test suite from a CUDA build tree). A call carries ``common`` and one of the other two.
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

from gpuproof import nets as proof_nets

FASHION_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
WORK = Path("/tmp/gpu-proof")  # where the run step unpacks and installs on the GPU machine
ENGINE_LIB = WORK / "engine" / "lib"
# What the run step imports beyond the GPU machine's own Python (3.12): caffetool's bundle
# installer, LMDB writer and log parser need these.
WHEELS = ("zstandard==0.25.0", "platformdirs==4.14.8", "lmdb==3.0.0", "pyelftools==0.33")


def prepare(prefix: Path, out: Path, fashion: Path, gtest: Path | None, say=print) -> None:
    """Write ``out/common``, ``out/data`` and (given a kept test suite) ``out/gtest``."""
    from caffetool.engine import bundles, import_caffe, locate

    caffe = import_caffe(locate(prefix, probe=False))  # the nets are written by the engine they run on
    if out.exists():
        shutil.rmtree(out)
    common = out / "common"
    (common / "nets").mkdir(parents=True)
    made = bundles.make(prefix, common / "engine.tar.zst")
    cuda = made.cuda or {}
    say(f"bundle: {made.size / 2**20:.1f} MiB, CUDA {cuda.get('major')}, built against {cuda.get('built_against')}")
    write_nets(caffe, common / "nets")
    for tool in TOOLS:
        build_tool(prefix, tool, common / "bin" / tool, cuda)
    download_wheels(common / "wheels")
    (out / "data").mkdir()
    for name in FASHION_FILES:  # xz: 4.4 MiB less than gzip, room the 64 MiB a call carries needs
        with gzip.open(fashion / name) as src, lzma.open(out / "data" / data_name(name), "wb",
                                                         preset=9 | lzma.PRESET_EXTREME) as dst:
            shutil.copyfileobj(src, dst)
    if gtest is not None:
        (out / "gtest").mkdir()
        pack_gtest(gtest, out / "gtest", cuda)
    for part in sorted(p for p in out.iterdir() if p.is_dir()):
        size = sum(p.stat().st_size for p in part.rglob("*") if p.is_file())
        say(f"payload {part}: {size / 2**20:.1f} MiB")


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
