"""The GPU proof's parts that can be checked without a GPU (benchmarks/gpuproof).

What runs only on the GPU machine (the engines' training runs, the CUDA-graph path of
torch_lenet.py, the logger inside a real ``caffe train``) is imported or compiled here, not run:
each test says how far it goes.
"""

from __future__ import annotations

import inspect
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
BENCHMARKS = PROJECT / "benchmarks"
RECORD = BENCHMARKS / "gpu" / "h200-2026-11-27-call1"
TOOLKIT_LIB = Path.home() / ".cache" / "caffetool" / "cuda-toolkit-13" / "lib64"
CAFFE_SOURCE = Path.home() / ".cache" / "caffetool" / "sources" / "caffe_1.0.0+git20180821.99bd997.orig.tar.gz"
FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def benchmarks_on_path(monkeypatch):
    """The proof's modules import each other as ``gpuproof.*``, as gpu_proof.py runs them."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))


# ---- the cudaMalloc logger -----------------------------------------------------------------

def test_logger_builds_and_exports_both_functions(tmp_path):
    from gpuproof import allocations

    library = allocations.build(tmp_path / allocations.LIBRARY)
    exported = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                              check=True).stdout.split()
    assert "cudaMalloc" in exported and "cudaFree" in exported


def test_logger_leaves_a_program_without_cuda_alone(tmp_path):
    from gpuproof import allocations

    library = allocations.build(tmp_path / allocations.LIBRARY)
    log = tmp_path / "calls.log"
    done = subprocess.run(["/bin/true"], env={"LD_PRELOAD": str(library), allocations.VARIABLE: str(log)})
    assert done.returncode == 0
    assert not log.exists()


@pytest.mark.skipif(not (TOOLKIT_LIB / "libcudart.so").exists(), reason="no CUDA toolkit folder "
                    "(caffetool engine.compile-check assembles one)")
def test_logger_sees_the_calls_a_program_makes_through_libcudart(tmp_path):
    """A program linked with the real ``libcudart`` (as libcaffe is) calls through the logger; with no
    driver here, CUDA answers 35 (cudaErrorInsufficientDriver) and the log says so."""
    from gpuproof import allocations

    library = allocations.build(tmp_path / allocations.LIBRARY)
    source = tmp_path / "calls.c"
    source.write_text("#include <stddef.h>\nint cudaMalloc(void **p, size_t n);\nint cudaFree(void *p);\n"
                      "int main(void) { void *p = NULL; cudaMalloc(&p, 4096); cudaFree(p); return 0; }\n")
    subprocess.run(["cc", str(source), "-o", str(tmp_path / "calls"), f"-L{TOOLKIT_LIB}", "-lcudart",
                    f"-Wl,-rpath,{TOOLKIT_LIB}"], check=True)
    log = tmp_path / "calls.log"
    subprocess.run([str(tmp_path / "calls")], env={"LD_PRELOAD": str(library), allocations.VARIABLE: str(log)},
                   check=True)
    assert log.read_text() == "malloc 4096 (nil) 35\nfree 0 (nil) 35\n"
    assert allocations.peak(log.read_text())["failed_calls"] == 2


# ---- the host-wait counter -----------------------------------------------------------------

def test_wait_counter_builds_and_exports_what_it_counts(tmp_path):
    from gpuproof import waits

    library = waits.build(tmp_path / waits.LIBRARY)
    exported = set(subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                                  check=True).stdout.split())
    assert {"cudaMemcpy", "cudaMemcpy_ptds", "cudaDeviceSynchronize", "cudaStreamSynchronize",
            "cudaStreamSynchronize_ptsz", "cudaEventSynchronize", "cublasSasum_v2", "cublasSdot_v2"} <= exported


@pytest.mark.skipif(not (TOOLKIT_LIB / "libcudart.so").exists(), reason="no CUDA toolkit folder "
                    "(caffetool engine.compile-check assembles one)")
def test_wait_counter_counts_the_calls_a_program_makes_through_libcudart(tmp_path):
    """A program linked with the real ``libcudart``: its synchronisations are counted as waits, its
    copy between two host buffers (CUDA sees no device memory without a driver) is counted apart."""
    from gpuproof import waits

    library = waits.build(tmp_path / waits.LIBRARY)
    source = tmp_path / "calls.c"
    source.write_text("#include <stddef.h>\nint cudaMemcpy(void *d, const void *s, size_t n, int k);\n"
                      "int cudaDeviceSynchronize(void);\nint cudaStreamSynchronize(void *s);\n"
                      "int main(void) { char a[8] = {0}, b[8]; cudaMemcpy(b, a, 8, 4); cudaDeviceSynchronize();\n"
                      "  cudaStreamSynchronize(NULL); cudaStreamSynchronize(NULL); return 0; }\n")
    subprocess.run(["cc", str(source), "-o", str(tmp_path / "calls"), f"-L{TOOLKIT_LIB}", "-lcudart",
                    f"-Wl,-rpath,{TOOLKIT_LIB}"], check=True)
    log = tmp_path / "counts.txt"
    subprocess.run([str(tmp_path / "calls")], env={"LD_PRELOAD": str(library), waits.VARIABLE: str(log)}, check=True)
    read = waits.read(log.read_text(), iterations=2)
    assert read["counts"]["memcpy_host_to_host"] == 1 and read["counts"]["device_synchronize"] == 1
    assert read["counts"]["stream_synchronize"] == 2
    assert read["waits"] == 3 and read["waits_per_iteration"] == 1.5
    done = subprocess.run(["/bin/true"], env={"LD_PRELOAD": str(library)})
    assert done.returncode == 0


def test_peak_replays_allocations_in_order():
    from gpuproof import allocations

    log = ("malloc 100 0x10 0\nmalloc 50 0x20 0\nfree 0 0x10 0\nmalloc 300 0x30 0\nmalloc 7 0x40 2\n"
           "free 0 0x99 0\nfree 0 (nil) 0\nnot a line\n")
    assert allocations.peak(log) == {"peak_live_bytes": 350, "sizes_at_peak": [300, 50], "allocations": 3,
                                     "live_at_exit": 350, "failed_calls": 1, "unmatched_frees": 1}


# ---- the second engine as a difference ------------------------------------------------------

def bundle(path: Path, files: dict[str, bytes], links: dict[str, str]) -> Path:
    """A ``.tar.zst`` laid out as caffetool's bundles are: the manifest first, then the install."""
    import zstandard

    with open(path, "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as zst, \
            tarfile.open(fileobj=zst, mode="w|") as tar:
        manifest = json.dumps({"files": sorted(files)}).encode()
        info = tarfile.TarInfo("caffetool-bundle.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


def test_the_baseline_is_carried_as_its_difference_and_installed_as_a_copy(tmp_path):
    from gpuproof import enginediff

    caffe = b"#!/bin/sh\necho caffe version 1.0.0\n"
    shared = {"bin/caffe": caffe, "lib/vendor/libopenblas.so.0": b"blas" * 1000, "lib/only_first.so": b"x"}
    first = bundle(tmp_path / "first.tar.zst", {**shared, "lib/libcaffe.so.1.0.0": b"tested"},
                   {"lib/libcaffe.so": "libcaffe.so.1.0.0"})
    second_files = {k: v for k, v in shared.items() if k != "lib/only_first.so"}
    second = bundle(tmp_path / "second.tar.zst", {**second_files, "lib/libcaffe.so.1.0.0": b"baseline",
                                                  "lib/only_second.so": b"y"},
                    {"lib/libcaffe.so": "libcaffe.so.1.0.0", "lib/extra.so": "only_second.so"})
    listing = enginediff.pack(first, second, tmp_path / "part")
    assert listing["changed"] == ["lib/extra.so", "lib/libcaffe.so.1.0.0", "lib/only_second.so"]
    assert listing["removed"] == ["lib/only_first.so"]

    installed = tmp_path / "engine"  # the first bundle as the GPU machine's installer leaves it
    with enginediff.open_bundle(first) as tar:
        tar.extractall(installed, filter="tar")
    (installed / "caffetool-bundle.json").unlink()
    (installed / "lib" / "nvidia").symlink_to(tmp_path)  # the link the installer makes to the CUDA wheels
    copy = tmp_path / "baseline"
    enginediff.install_copy(installed, tmp_path / "part", copy)
    assert (copy / "lib" / "libcaffe.so.1.0.0").read_bytes() == b"baseline"
    assert (installed / "lib" / "libcaffe.so.1.0.0").read_bytes() == b"tested"
    assert (copy / "lib" / "extra.so").readlink() == Path("only_second.so")
    assert (copy / "lib" / "nvidia").readlink() == tmp_path
    assert not (copy / "lib" / "only_first.so").exists()
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file() and p.name != "nvidia") == \
        sorted(["bin/caffe", "lib/vendor/libopenblas.so.0", "lib/libcaffe.so.1.0.0", "lib/only_second.so",
                "lib/libcaffe.so", "lib/extra.so"])


def test_a_damaged_difference_is_refused(tmp_path):
    from gpuproof import enginediff

    first = bundle(tmp_path / "first.tar.zst", {"lib/a.so": b"a"}, {})
    second = bundle(tmp_path / "second.tar.zst", {"lib/a.so": b"b"}, {})
    enginediff.pack(first, second, tmp_path / "part")
    listing = json.loads((tmp_path / "part" / enginediff.LISTING).read_text())
    listing["files"]["lib/a.so"] = "0" * 64
    (tmp_path / "part" / enginediff.LISTING).write_text(json.dumps(listing))
    (tmp_path / "engine" / "lib").mkdir(parents=True)
    (tmp_path / "engine" / "lib" / "a.so").write_bytes(b"a")
    with pytest.raises(ValueError, match=r"a\.so does not match the sha256 in .*engine\.json"):
        enginediff.install_copy(tmp_path / "engine", tmp_path / "part", tmp_path / "copy")


# ---- what a call carries ----------------------------------------------------------------------

def test_a_payload_a_call_cannot_carry_is_refused_with_each_part():
    from gpuproof import payload

    mib = 2**20
    payload.check_fits({"common": 30 * mib, "data": 25 * mib, "baseline": 2 * mib, "gtest": 4 * mib}, 6 * mib)
    with pytest.raises(payload.PayloadTooLarge) as refused:
        payload.check_fits({"common": 30 * mib, "data": 25 * mib, "baseline": 4 * mib, "gtest": 4 * mib}, 6 * mib)
    assert str(refused.value).startswith(
        "the training,torch,memory call carries 65.0 MiB (common/ 30.0 + data/ 25.0 + baseline/ 4.0 + the "
        "checkout 6.0), over the 64 MiB a call carries: build the engines without OpenCV")
    with pytest.raises(payload.PayloadTooLarge) as refused:  # the second call carries the Python for pycaffe
        payload.check_fits({"common": 30 * mib, "gtest": 4 * mib, "pycaffe": 25 * mib}, 6 * mib)
    assert str(refused.value).startswith("the pycaffe,gtest call carries 65.0 MiB (common/ 30.0 + gtest/ 4.0 + "
                                         "pycaffe/ 25.0 + the checkout 6.0)")


@pytest.mark.engine
def test_an_engine_whose_binaries_load_another_libcaffe_is_refused(engine, tmp_path):
    """A copy of an engine's ``caffe`` and ``_caffe.so`` without its ``libcaffe`` resolves the library
    elsewhere (an absolute RUNPATH) or not at all: the payload is not made of it."""
    from caffetool.engine.locate import PYCAFFE_DIR
    from gpuproof import payload

    payload.check_own_libcaffe(engine.prefix)
    copy = tmp_path / "engine"
    for part in ("bin/caffe", f"{PYCAFFE_DIR}/caffe/_caffe.so"):
        (copy / part).parent.mkdir(parents=True)
        shutil.copy2(engine.prefix / part, copy / part)
    (copy / "lib").mkdir(exist_ok=True)
    with pytest.raises(payload.ForeignLibrary, match=r"bin/caffe loads .*, not the one in .*/engine/lib: point"):
        payload.check_own_libcaffe(copy)


@pytest.mark.engine
def test_the_carried_python_runs_pycaffes_checks_without_the_venv(engine, tmp_path):
    """The Python the payload carries (this machine's interpreter, its standard library, NumPy,
    protobuf and BVLC's pycaffe suite), unpacked elsewhere and run with nothing of the venv's, on
    the installed engine's pycaffe, in CPU mode: what the GPU machine runs in GPU mode."""
    from caffetool.config import cache_home
    from caffetool.engine.recipe import CAFFE_SOURCE
    from gpuproof import pyruntime

    archive = pyruntime.pack(tmp_path / "pack", cache_home() / "sources" / CAFFE_SOURCE.orig.name, level=3)
    python = pyruntime.unpack(archive, tmp_path / "python")
    out, scratch = tmp_path / "pycaffe.json", tmp_path / "tmp"
    scratch.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(scratch),
           **pyruntime.environment(tmp_path / "python", engine.python_path)}
    done = subprocess.run([str(python), str(BENCHMARKS / "gpuproof" / "pycaffe_gpu.py"), "run", "--mode", "cpu",
                           "--suite", str(tmp_path / "python" / "suite"), "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert list(scratch.iterdir()) == []  # every check's files, BVLC's suite's nets too, removed
    assert [name for name, entry in results.items() if "error" in entry] == []
    imports = results["imports"]
    assert (imports["prefix"], imports["absent"], imports["loaded"]) == (
        str(tmp_path / "python"), {"skimage": True, "scipy": True}, [])
    assert imports["caffe_file"].startswith(str(engine.python_path))
    assert results["suite"]["ran"] == 51 and results["suite"]["failures"] == results["suite"]["errors"] == []
    assert results["gpu_equals_cpu"]["loss_difference"] == 0
    assert results["python_layer"]["last_loss"] < results["python_layer"]["first_loss"] / 2
    for loop in ("loop_sgd", "loop_adam", "step_sgd"):
        assert results[f"{loop}_graphs"]["iterations"] == 60
        assert results[f"{loop}_graphs_against_eager"] == {"identical": True, "largest_difference": 0.0}


def test_the_checkout_counts_what_a_call_sends_of_it():
    from gpuproof import payload

    tracked = payload.tree_bytes(PROJECT)
    assert (PROJECT / "pyproject.toml").stat().st_size < tracked < 64 * 2**20


# ---- the test suite across calls --------------------------------------------------------------

def test_finished_tests_are_read_from_a_recorded_call():
    from gpuproof import gtestlist

    results = json.loads((RECORD / "results.json").read_text())["caffe_test_suite"]
    assert len(gtestlist.done_in_records([RECORD])) == results["tests_ok"] + len(results.get("failed", []))
    with tarfile.open(RECORD / "logs.tar.gz") as tar:
        stopped = [gtestlist.stopped_in(tar.extractfile(f"logs/gtest_shard{i}.log").read().decode())
                   for i in range(results["shards"])]
    assert stopped == results["aborted"]


def test_the_listing_is_read_and_dealt_into_shards():
    from gpuproof import gtestlist

    text = ("Cuda number of devices: 1\nTyped/0.  # TypeParam = float\n  Passes\n  Fails\n"
            "Param/Case.\n  Run/0  # GetParam() = 1\nPlain.\n  One\n")
    names = gtestlist.listed(text)
    assert names == ["Typed/0.Passes", "Typed/0.Fails", "Param/Case.Run/0", "Plain.One"]
    assert gtestlist.shards(names, 3) == [["Typed/0.Passes", "Plain.One"], ["Typed/0.Fails"], ["Param/Case.Run/0"]]
    assert gtestlist.shards(names[:1], 12) == [["Typed/0.Passes"]]
    with pytest.raises(ValueError, match="cannot name exactly"):
        gtestlist.gtest_filter(["A.B-C"])


@pytest.mark.skipif(not CAFFE_SOURCE.exists(), reason="no Caffe source tarball (caffetool engine.install fetches it)")
def test_a_second_call_runs_only_what_the_first_did_not_finish(tmp_path):
    """A real googletest binary (Caffe's own vendored googletest): list, leave out the finished
    names, run the rest in shards with positive filters, and read what finished."""
    from gpuproof import gtestlist

    with tarfile.open(CAFFE_SOURCE) as tar:
        tar.extractall(tmp_path, members=[tar.getmember(f"src/gtest/{name}") for name in ("gtest-all.cpp", "gtest.h")],
                       filter="data")
    (tmp_path / "t.cpp").write_text(
        '#include "gtest/gtest.h"\ntemplate <typename T> class Typed : public ::testing::Test {};\n'
        "typedef ::testing::Types<float, double> Both;\nTYPED_TEST_CASE(Typed, Both);\n"
        "TYPED_TEST(Typed, Passes) {}\nTYPED_TEST(Typed, Fails) { EXPECT_EQ(sizeof(TypeParam), 4u); }\n"
        "TEST(Plain, One) {}\nTEST(Plain, Two) {}\n"
        "int main(int argc, char **argv) { ::testing::InitGoogleTest(&argc, argv); return RUN_ALL_TESTS(); }\n")
    binary = tmp_path / "suite"
    subprocess.run(["g++", "-O0", f"-I{tmp_path / 'src'}", str(tmp_path / "src" / "gtest" / "gtest-all.cpp"),
                    str(tmp_path / "t.cpp"), "-o", str(binary), "-lpthread"], check=True)
    names = gtestlist.listed(subprocess.run([str(binary), "--gtest_list_tests"], capture_output=True, text=True,
                                            check=True).stdout)
    assert len(names) == 6
    first = subprocess.run([str(binary), gtestlist.gtest_filter(["Typed/0.Passes", "Typed/1.Fails"])],
                           capture_output=True, text=True).stdout
    (tmp_path / "done.txt").write_text("# from the first call\n")
    ok, failed = gtestlist.finished(first)
    assert (ok, failed) == (["Typed/0.Passes"], ["Typed/1.Fails"])
    gtestlist.write_names(tmp_path / "done.txt", ok + failed)
    done = gtestlist.read_names(tmp_path / "done.txt")
    remaining = [name for name in names if name not in done]
    outputs = [subprocess.run([str(binary), gtestlist.gtest_filter(shard)], capture_output=True, text=True).stdout
               for shard in gtestlist.shards(remaining, 3)]
    ran = [name for out in outputs for part in gtestlist.finished(out) for name in part]
    assert sorted(ran) == sorted(remaining) == ["Plain.One", "Plain.Two", "Typed/0.Fails", "Typed/1.Passes"]
    assert [name for out in outputs for name in gtestlist.finished(out)[1]] == []


# ---- LeNet: Caffe's log and PyTorch's anchor --------------------------------------------------

def test_training_time_is_read_off_a_recorded_caffe_log():
    from gpuproof import proof

    with tarfile.open(RECORD / "logs.tar.gz") as tar:
        log = tar.extractfile("logs/lenet_cudnn.log").read().decode()
    span = proof.training_span(log)
    recorded = json.loads((RECORD / "results.json").read_text())["lenet_cudnn"]
    assert span["timed_iters"] == 9900
    assert 0 < span["training_seconds"] < recorded["seconds"] - recorded["testing_seconds"] * 0.5
    assert span["training_iter_per_s"] == pytest.approx(9900 / span["training_seconds"], rel=1e-3)


def test_vgg16_timings_are_read_off_recorded_caffe_time_logs(tmp_path):
    """The figures ``versus.vgg16_time`` records, from the ``time`` group's VGG-16 logs of a real
    call (the same net and arguments): each run's passes, then medians and tested/baseline. The
    runs themselves need the GPU machine."""
    from gpuproof import proof, versus

    names = ("cudnn", "cudnn_ws8", "cudnn_ws1024", "cudnn_tf32")
    with tarfile.open(RECORD / "logs.tar.gz") as tar:
        tar.extractall(tmp_path, members=[tar.getmember(f"logs/time_vgg16_{name}.log") for name in names],
                       filter="data")
    recorded = json.loads((RECORD / "results.json").read_text())
    figures = {name: proof.time_figures((tmp_path / "logs" / f"time_vgg16_{name}.log").read_text()) for name in names}
    assert figures["cudnn"]["ms"] == {"Average Forward pass": 140.891, "Average Backward pass": 151.908,
                                      "Average Forward-Backward": 292.948}
    assert figures["cudnn"]["data_layer_ms"] == pytest.approx(67.2558 + 0.0035696)
    for name in names:
        assert {k: figures[name][k] for k in ("ms", "net_ms")} == \
            {k: recorded[f"time_vgg16_{name}"][k] for k in ("ms", "net_ms")}
    compared = versus.medians_ratio({"baseline": [figures["cudnn"]["ms"], figures["cudnn_ws8"]["ms"]],
                                    "tested": [figures["cudnn_ws1024"]["ms"], figures["cudnn_tf32"]["ms"]]})
    assert compared["median_ms"]["baseline"]["Average Forward-Backward"] == pytest.approx((292.948 + 315.007) / 2)
    assert compared["ratio_tested_to_baseline"]["Average Forward-Backward"] == \
        pytest.approx((227.647 + 239.172) / (292.948 + 315.007), abs=1e-4)
    assert set(compared["ratio_tested_to_baseline"]) == set(versus.PASSES)
    unreported = versus.medians_ratio({"baseline": [{}], "tested": [figures["cudnn"]["ms"]]})
    assert unreported["ratio_tested_to_baseline"] == {}


def test_torch_lenet_still_trains_on_the_cpu(tmp_path):
    pytest.importorskip("torch", reason="no PyTorch in this Python (cpu_speed.py gives it benchmarks/.venv-torch)")
    if not (FASHION / "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip(f"no Fashion-MNIST in {FASHION}")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "torch_lenet.py"), "--images",
                           str(FASHION / "t10k-images-idx3-ubyte.gz"), "--labels",
                           str(FASHION / "t10k-labels-idx1-ubyte.gz"), "--iters", "103", "--threads", "1"],
                          capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout)
    assert (figures["iters"], figures["timed_iters"], figures["threads"]) == (103, 3, 1)
    assert [i for i, _ in figures["losses"]] == [0, 100, 103]
    assert "test_accuracy" not in figures and "cuda_graphs" not in figures


def test_the_update_a_cuda_graph_replays_is_caffes_sgd():
    """The graph's form of the update (learning rate in a tensor, gradients kept), run here on the
    CPU against the eager one: the same weights after three steps. The capture itself needs a GPU."""
    torch = pytest.importorskip("torch", reason="no PyTorch in this Python")
    import torch_lenet

    def trained(graph_form: bool) -> dict:
        params = torch_lenet.init_params(torch.Generator().manual_seed(1))
        solver = torch_lenet.CaffeSGD(params)
        x, y = torch.rand(4, 1, 28, 28, generator=torch.Generator().manual_seed(2)), torch.tensor([1, 2, 3, 4])
        for iteration in range(3):
            torch_lenet.forward(params, x, y).backward()
            if graph_form:
                solver.step_on_device(torch.tensor(solver.rate(iteration)))
                for p in params.values():
                    p.grad = None
            else:
                solver.step(iteration)
        return params

    eager, graphed = trained(False), trained(True)
    for name in eager:
        torch.testing.assert_close(graphed[name], eager[name], rtol=1e-6, atol=1e-7)


def test_torch_lenet_refuses_cuda_graphs_off_the_gpu():
    """The CUDA-graph path needs a GPU: here it is only compiled and its flag checked."""
    pytest.importorskip("torch", reason="no PyTorch in this Python")
    compile((BENCHMARKS / "torch_lenet.py").read_text(), "torch_lenet.py", "exec")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "torch_lenet.py"), "--images", "x", "--labels", "y",
                           "--cuda-graphs"], capture_output=True, text=True)
    assert done.returncode == 2 and "--cuda-graphs needs --device cuda" in done.stderr


def test_the_run_step_imports_and_names_its_groups():
    """What the GPU machine runs, imported here (Python and the payload's wheels only at import)."""
    from gpuproof import steps, versus

    assert steps.GROUPS == ("training", "torch", "time", "memory", "pycaffe", "gtest", "compare", "host")
    assert inspect.getsource(steps.run).count('"pycaffe": pycaffe') == 1
    assert [engine for _, engine, _ in versus.ENGINES] == ["baseline", "tested", "tested"]
    training = inspect.getsource(steps.training)
    assert callable(versus.vgg16_time)
    assert training.index("versus.host_waits(proof)") < training.index("versus.vgg16_time(proof)")
    assert shutil.which("bash")
    assert subprocess.run(["bash", "-n", str(BENCHMARKS / "gpu_proof_call.sh")]).returncode == 0
