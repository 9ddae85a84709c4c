"""pycaffe on the GPU, run by the Python the payload carries (:mod:`gpuproof.pyruntime`): Python 3.11
with NumPy and protobuf only, no scikit-image or SciPy (engine patch 0015 imports them lazily).

``run`` starts each check in a process of its own, so that one that crashes in CUDA leaves the
others their results, and collects what each printed (one JSON object) with the lines Caffe logged
about CUDA graphs. The checks:

* ``imports``: ``import caffe`` without scikit-image and SciPy, and what it loaded.
* ``gpu_equals_cpu``: one LeNet forward and backward pass on the CPU, then on the GPU, with the same
  weights and batch: the largest difference of the loss and of every gradient.
* ``loop_*``: the training loop pycaffe's users write (a batch set from NumPy, ``solver.step(1)``,
  again), SGD and Adam, with CUDA graphs on and off (``cuda_graphs: false``): the weights' digest
  and the losses, so that graphs and eager can be compared to the byte; and ``step_*``, the same
  iterations in one ``solver.step(n)``.
* ``python_layer``: a net whose loss is a Python layer trains, and its graphs are off with the
  reason logged.
* ``suite``: BVLC's ``python/caffe/test`` (``test_draw`` aside: it needs pydot) with unittest; in
  GPU mode the suite's own ``caffe.set_mode_cpu()`` calls select the GPU.

Here (``--mode cpu``) the same checks run on the CPU, so the carried Python is tested before it
travels.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCH = 32
ITERATIONS = 60
CHECKS = ("imports", "gpu_equals_cpu", "loop_sgd_graphs", "loop_sgd_eager", "loop_adam_graphs",
          "loop_adam_eager", "step_sgd_graphs", "step_sgd_eager", "python_layer", "suite")
WEIGHTS = "weights.npz"  # a training check's final weights, in its folder
GRAPH_WORDS = ("CUDA graph",)  # the engine's log lines about graphs (patch 0014) start so
SOLVERS = {"sgd": 'type: "SGD" momentum: 0.9', "adam": 'type: "Adam" momentum: 0.9 momentum2: 0.999'}
PY_LOSS = '''
import caffe


class EuclideanLoss(caffe.Layer):
    """BVLC's examples/pycaffe/layers/pyloss.py, the loss every pycaffe tutorial writes."""

    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        self.diff = bottom[0].data.copy()
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.diff[...] = bottom[0].data - bottom[1].data
        top[0].data[...] = (self.diff ** 2).sum() / bottom[0].num / 2.0

    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = self.diff / bottom[0].num
'''


def lenet(loss: str = "SoftmaxWithLoss") -> str:
    """LeNet on Input layers (a batch from NumPy), the loss given by type or as a Python layer."""
    conv = 'convolution_param {{ num_output: {} kernel_size: 5 weight_filler {{ type: "xavier" }} }}'
    ip = 'inner_product_param {{ num_output: {} weight_filler {{ type: "xavier" }} }}'
    pool = 'pooling_param { pool: MAX kernel_size: 2 stride: 2 }'
    label = f"dim: {BATCH}" + (" dim: 10" if loss != "SoftmaxWithLoss" else "")
    layers = [
        f'layer {{ name: "data" type: "Input" top: "data" input_param {{ shape {{ dim: {BATCH} dim: 1 dim: 28 dim: 28 }} }} }}',
        f'layer {{ name: "label" type: "Input" top: "label" input_param {{ shape {{ {label} }} }} }}',
        f'layer {{ name: "conv1" type: "Convolution" bottom: "data" top: "conv1" {conv.format(20)} }}',
        f'layer {{ name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" {pool} }}',
        f'layer {{ name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2" {conv.format(50)} }}',
        f'layer {{ name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" {pool} }}',
        f'layer {{ name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1" {ip.format(500)} }}',
        'layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }',
        f'layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" {ip.format(10)} }}',
        (f'layer {{ name: "loss" type: "{loss}" bottom: "ip2" bottom: "label" top: "loss" }}'
         if loss == "SoftmaxWithLoss" else
         'layer { name: "loss" type: "Python" bottom: "ip2" bottom: "label" top: "loss" loss_weight: 1 '
         'python_param { module: "pyloss" layer: "EuclideanLoss" } }'),
    ]
    return 'name: "LeNet"\nforce_backward: true\n' + "\n".join(layers) + "\n"


def batches(count: int, regression: bool = False):
    """Seeded batches, the same in every process: images in [0, 1), labels (or targets)."""
    import numpy as np

    rng = np.random.default_rng(7)
    for _ in range(count):
        images = rng.random((BATCH, 1, 28, 28), dtype=np.float32)
        labels = (rng.random((BATCH, 10), dtype=np.float32) if regression
                  else rng.integers(0, 10, BATCH).astype(np.float32))
        yield images, labels


def select(caffe, mode: str) -> None:
    if mode == "gpu":
        caffe.set_device(0)
        caffe.set_mode_gpu()
    else:
        caffe.set_mode_cpu()


def solver_file(folder: Path, net: str, kind: str, graphs: bool, mode: str) -> Path:
    (folder / "net.prototxt").write_text(net)
    path = folder / "solver.prototxt"
    path.write_text(f'net: "{folder / "net.prototxt"}" {SOLVERS[kind]} base_lr: 0.01 lr_policy: "inv" gamma: 0.0001 '
                    f'power: 0.75 weight_decay: 0.0005 max_iter: 100000 display: 0 random_seed: 1 '
                    f'snapshot_after_train: false solver_mode: {mode.upper()}'
                    + ("" if graphs else " cuda_graphs: false"))
    return path


def weights_digest(net) -> str:
    digest = hashlib.sha256()
    for name, blobs in net.params.items():
        for blob in blobs:
            digest.update(name.encode() + blob.data.tobytes())
    return digest.hexdigest()


# ---- the checks (each in a process of its own) ---------------------------------------------------

def check_imports(mode: str, folder: Path) -> dict:
    start = time.perf_counter()
    import caffe

    select(caffe, mode)
    return {"python": sys.version.split()[0], "prefix": sys.prefix, "import_seconds": round(time.perf_counter() - start, 2),
            "numpy": sys.modules["numpy"].__version__, "protobuf": sys.modules["google.protobuf"].__version__,
            "absent": {name: importlib.util.find_spec(name) is None for name in ("skimage", "scipy")},
            "loaded": sorted({name for name in ("skimage", "scipy", "matplotlib", "PIL") if name in sys.modules}),
            "caffe_file": caffe.__file__}


def check_gpu_equals_cpu(mode: str, folder: Path) -> dict:
    import caffe
    import numpy as np

    (folder / "net.prototxt").write_text(lenet())
    caffe.set_mode_cpu()
    net = caffe.Net(str(folder / "net.prototxt"), caffe.TRAIN)
    images, labels = next(batches(1))
    net.blobs["data"].data[...] = images
    net.blobs["label"].data[...] = labels

    def passes() -> tuple[float, dict]:
        net.clear_param_diffs()
        loss = float(net.forward()["loss"])
        net.backward()
        return loss, {f"{name}/{i}": blob.diff.copy() for name, blobs in net.params.items()
                      for i, blob in enumerate(blobs)}

    cpu_loss, cpu_diffs = passes()
    select(caffe, mode)
    loss, diffs = passes()
    return {"loss_cpu": cpu_loss, "loss": loss, "loss_difference": abs(loss - cpu_loss),
            "largest_gradient_difference": {k: float(np.abs(diffs[k] - v).max()) for k, v in cpu_diffs.items()},
            "largest_gradient": {k: float(np.abs(v).max()) for k, v in cpu_diffs.items()}}


def training(mode: str, folder: Path, kind: str, graphs: bool, one_call: bool) -> dict:
    import caffe

    select(caffe, mode)
    solver = caffe.get_solver(str(solver_file(folder, lenet(), kind, graphs, mode)))
    net = solver.net
    losses = []
    start = time.perf_counter()
    if one_call:  # one batch, every iteration inside Solver::Step
        images, labels = next(batches(1))
        net.blobs["data"].data[...] = images
        net.blobs["label"].data[...] = labels
        solver.step(ITERATIONS)
        losses.append(float(net.blobs["loss"].data.flat[0]))
    else:
        for images, labels in batches(ITERATIONS):
            net.blobs["data"].data[...] = images
            net.blobs["label"].data[...] = labels
            solver.step(1)
            losses.append(float(net.blobs["loss"].data.flat[0]))
    import numpy as np

    np.savez(folder / WEIGHTS, **{f"{name}/{i}": blob.data for name, blobs in net.params.items()
                                  for i, blob in enumerate(blobs)})
    return {"iterations": solver.iter, "seconds": round(time.perf_counter() - start, 3),
            "weights_sha256": weights_digest(net), "losses": [round(x, 6) for x in losses[::10]] + [losses[-1]]}


def check_python_layer(mode: str, folder: Path) -> dict:
    (folder / "pyloss.py").write_text(PY_LOSS)
    sys.path.insert(0, str(folder))
    import caffe

    select(caffe, mode)
    solver = caffe.get_solver(str(solver_file(folder, lenet("Python"), "sgd", True, mode)))
    losses = []
    for images, targets in batches(20, regression=True):
        solver.net.blobs["data"].data[...] = images
        solver.net.blobs["label"].data[...] = targets
        solver.step(1)
        losses.append(float(solver.net.blobs["loss"].data.flat[0]))
    return {"iterations": solver.iter, "first_loss": losses[0], "last_loss": losses[-1]}


def check_suite(mode: str, folder: Path, suite: Path) -> dict:
    import unittest

    import caffe

    select(caffe, mode)
    if mode == "gpu":
        caffe.set_mode_cpu = caffe.set_mode_gpu  # the suite's setUp calls select the GPU here
    suite = suite.resolve()
    os.chdir(suite)  # the suite's Python layers are modules of its folder
    tempfile.tempdir = str(folder)  # the nets it writes with delete=False, removed with the folder
    tests = unittest.defaultTestLoader.discover(str(suite), pattern="test_*.py", top_level_dir=str(suite))
    tests = unittest.TestSuite(t for t in tests if "test_draw" not in str(t))
    result = unittest.TextTestRunner(stream=open(os.devnull, "w"), verbosity=0).run(tests)
    return {"ran": result.testsRun, "failures": [(str(t), text[-600:]) for t, text in result.failures],
            "errors": [(str(t), text[-600:]) for t, text in result.errors], "skipped": len(result.skipped)}


def check(name: str, mode: str, folder: Path, suite: Path | None) -> dict:
    if name.startswith(("loop_", "step_")):
        _, kind, graphs = name.split("_")
        return training(mode, folder, kind, graphs == "graphs", name.startswith("step_"))
    if name == "suite":
        return check_suite(mode, folder, suite)
    return {"imports": check_imports, "gpu_equals_cpu": check_gpu_equals_cpu,
            "python_layer": check_python_layer}[name](mode, folder)


# ---- the run: each check in a process --------------------------------------------------------------

def run(mode: str, suite: Path | None, timeout: float) -> dict:
    """Every check in a process of its own, then graphs against eager: the weights' digests and
    largest difference. The CPU's runs get a fixed thread team and MKL's strict reproducibility, so
    that two runs of the same iterations compute the same bits."""
    results: dict = {}
    env = {"MKL_CBWR": "AUTO,STRICT", "CAFFE_ADAPT_THREADS": "0", **os.environ, "GLOG_logtostderr": "1",
           "GLOG_minloglevel": "0"}
    with tempfile.TemporaryDirectory() as scratch:
        for name in CHECKS:
            if name == "suite" and suite is None:
                continue
            folder = Path(scratch) / name
            folder.mkdir()
            results[name] = one_check(name, mode, folder, suite, env, timeout)
        for kind in ("loop_sgd", "loop_adam", "step_sgd"):
            on, off = (Path(scratch) / f"{kind}_{way}" / WEIGHTS for way in ("graphs", "eager"))
            if on.exists() and off.exists():
                results[f"{kind}_graphs_against_eager"] = compared(on, off)
    return results


def one_check(name: str, mode: str, folder: Path, suite: Path | None, env: dict, timeout: float) -> dict:
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, __file__, "check", name, "--mode", mode, "--folder", str(folder),
                               *(["--suite", str(suite)] if suite else [])],
                              capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    entry = json.loads(lines[-1]) if done.returncode == 0 and lines else {
        "error": f"exit {done.returncode}", "stderr": done.stderr.splitlines()[-25:]}
    entry["graph_log"] = [line.split("] ", 1)[-1] for line in done.stderr.splitlines()
                          if any(word in line for word in GRAPH_WORDS)][:6]
    entry["process_seconds"] = round(time.perf_counter() - start, 2)
    return entry


def compared(first: Path, second: Path) -> dict:
    import numpy as np

    with np.load(first) as a, np.load(second) as b:
        largest = max(float(np.abs(a[k] - b[k]).max()) for k in a.files)
        return {"identical": all(a[k].tobytes() == b[k].tobytes() for k in a.files),
                "largest_difference": largest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    r = sub.add_parser("run")
    r.add_argument("--mode", choices=("gpu", "cpu"), default="gpu")
    r.add_argument("--suite", type=Path, help="BVLC's python/caffe/test")
    r.add_argument("--timeout", type=float, default=240)
    r.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("check")
    c.add_argument("name", choices=CHECKS)
    c.add_argument("--mode", choices=("gpu", "cpu"), default="gpu")
    c.add_argument("--folder", type=Path, required=True)
    c.add_argument("--suite", type=Path)
    args = parser.parse_args()
    if args.step == "run":
        args.out.write_text(json.dumps(run(args.mode, args.suite, args.timeout), indent=1))
    else:
        print(json.dumps(check(args.name, args.mode, args.folder, args.suite)))


if __name__ == "__main__":
    main()
