"""What the real engine allocates: a solver built in pycaffe, one test pass and one training step.

In CPU mode the figure is glibc's own count of bytes in use (``mallinfo2``: ``uordblks`` plus
``hblkhd``, through ctypes) just before the solver is built and after ``solver.step(1)`` — which,
with ``test_initialization``, first runs the TEST net once, as training does. The mmap threshold
is pinned (``MALLOC_MMAP_THRESHOLD_``) so glibc does not move it while Caffe frees the TEST net's
own weights. The data comes from a small LMDB of random images of the input's size, made for the
measurement.

In GPU mode the ``caffe`` binary trains the same solver for one step on the GPU while NVML reads
the card's memory in use (:mod:`caffetool.memory.gpumeasure` says how and what it leaves out).

A CPU measurement whose estimate is past the share of this machine's available memory that the
export's verification may take (:data:`caffetool.memory.headroom.SHARE`) is refused before anything is
allocated (:func:`check_room`), with the largest batch that fits: Caffe would otherwise stop on its
own allocation check, or the kernel end it, partway through. Limits: the card's memory in GPU mode
is left to the measurement itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from caffetool.data import db
from caffetool.engine import EngineInfo, cpu_threads
from caffetool.errors import ConfigError, RunError
from caffetool.memory import estimator, fitting, gpumeasure, headroom
from caffetool.proc import last_lines

CHILD = r"""
import ctypes, json, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
def used():
    m = libc.mallinfo2()
    return m.uordblks + m.hblkhd
import caffe
caffe.set_mode_cpu()
# One-time engine set-up (protobuf descriptor pools, registries) is not the solver's: a tiny
# solver is built and stepped first, so the figure below holds only what this net allocates.
with open("warmup.prototxt", "w") as f:
    f.write('layer { name: "d" type: "DummyData" top: "d" top: "l" dummy_data_param { shape { dim: 1 dim: 2 } '
            'shape { dim: 1 } } } layer { name: "ip" type: "InnerProduct" bottom: "d" top: "ip" '
            'inner_product_param { num_output: 2 } } layer { name: "loss" type: "SoftmaxWithLoss" '
            'bottom: "ip" bottom: "l" top: "loss" }')
with open("warmup_solver.prototxt", "w") as f:
    f.write('net: "warmup.prototxt" base_lr: 0.1 lr_policy: "fixed" max_iter: 1 solver_mode: CPU '
            'snapshot_after_train: false')
warm = caffe.get_solver("warmup_solver.prototxt")
warm.step(1)
del warm
before = used()
solver = caffe.get_solver(sys.argv[1])
built = used()
solver.step(1)
after = used()
print(json.dumps({"before": before, "built": built, "after": after, "allocated": after - before}))
"""


def check_room(net: Any, e: estimator.Estimate, text: str | None = None, available: int | None = None) -> None:
    """Refuse to measure, in CPU mode, a net whose estimate ``e`` is past :data:`headroom.SHARE` of the
    memory available now (``available`` bytes, else the machine's), naming the batch that fits."""
    if e.options.mode != "cpu":
        return
    free = headroom.available_bytes() if available is None else available
    budget = int(headroom.SHARE * free)
    if e.total <= budget:
        return
    batch = e.rows[0].top[0] if e.rows and e.rows[0].top else (e.options.batch or 1)
    fits = _largest_batch(net, e.options, budget, text, batch)
    advice = (f"measure with --batch-size {fits} or less" if fits else
              "no batch of this net fits: measure it on a machine with more memory")
    raise ConfigError(f"measuring batch {batch} needs about {_gib(e.total)} by the estimate, and this machine has "
                      f"{_gib(free)} available ({_gib(budget)}, {headroom.SHARE:.0%} of it, to give a measurement): "
                      f"{advice} (nothing was run)")


def _largest_batch(net: Any, options: estimator.Options, budget: int, text: str | None, over: int) -> int:
    """The largest batch below ``over`` (one that does not fit) whose estimate is within ``budget``.

    :func:`fitting.largest_batch`'s straight line, fitted near batch 3, starts the search: on the CPU
    the OpenMP engine's convolution scratch stops growing with the batch, so the line is steeper than
    the estimate at large batches and its answer a batch that fits, not the largest.
    """
    low, high = min(fitting.largest_batch(net, options, budget, text), over - 1), over  # low fits, high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if estimator.estimate(net, replace(options, batch=middle), text).total <= budget \
            else (low, middle)
    return low


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:,.1f} GiB"


def make_lmdb(path: Path, records: int, shape: tuple[int, int, int], classes: int, caffe: Any) -> None:
    """An LMDB of ``records`` random images and labels, for the measured net's Data layer to read."""
    rng = np.random.default_rng(0)
    values = []
    for i in range(records):
        d = caffe.proto.caffe_pb2.Datum(channels=shape[0], height=shape[1], width=shape[2], label=i % classes,
                                        data=rng.integers(0, 256, int(np.prod(shape)), dtype=np.uint8).tobytes())
        values.append(d.SerializeToString())
    writer = db.Writer(path, "lmdb")
    writer.put_chunk(db.keys(0, records), values)
    writer.close()


def measure(engine: EngineInfo, caffe: Any, net: Any, solver_type: str, input_shape: tuple[int, int, int],
            classes: int, mode: str = "cpu", device: int = 0, threads: int = 1) -> dict:
    """Bytes the engine allocates for ``net`` (a train/test NetParameter) with ``solver_type``.

    ``mode`` is ``cpu`` (malloc's count in pycaffe, the engine on ``threads`` CPU threads) or ``gpu``
    (NVML, on GPU ``device``).
    """
    with tempfile.TemporaryDirectory(prefix="caffetool-measure-") as tmp:
        folder = Path(tmp)
        prepare(folder, caffe, net, solver_type, input_shape, classes, mode)
        return _measure_folder(engine, folder, mode, device, threads)


def measure_project(engine: EngineInfo, caffe: Any, loaded: Any, solver_type: str, mode: str = "cpu",
                    device: int = 0, threads: int = 1) -> dict:
    """Bytes the engine allocates for a user's own solver (a :class:`caffetool.nets.project.Project`,
    its data as it names it): built, every test net tested once, one step, with ``solver_type``."""
    from caffetool.nets import project  # noqa: PLC0415 - only --solver measures a project

    pb = caffe.proto.caffe_pb2
    s = loaded.solver
    s.type = solver_type
    s.max_iter = gpumeasure.STEPS if mode == "gpu" else 1
    s.test_interval, s.test_initialization, s.snapshot, s.snapshot_after_train = 1000, True, 0, False
    s.solver_mode = pb.SolverParameter.GPU if mode == "gpu" else pb.SolverParameter.CPU
    if s.test_iter:
        s.test_iter[:] = [1] * len(s.test_iter)  # one batch allocates what any number does
    with tempfile.TemporaryDirectory(prefix="caffetool-measure-") as tmp:
        folder = Path(tmp)
        project.write(loaded, folder, pb)
        return _measure_folder(engine, folder, mode, device, threads)


def _measure_folder(engine: EngineInfo, folder: Path, mode: str, device: int, threads: int = 1) -> dict:
    """What the engine allocates for ``folder/solver.prototxt``: malloc's count in pycaffe (CPU, on
    ``threads`` threads), or NVML's on GPU ``device``."""
    if mode == "gpu":
        return gpumeasure.measure(engine.caffe, folder, device)
    env = {**os.environ, **{name: str(threads) for name in cpu_threads.VARIABLES},
           "GLOG_minloglevel": "2", "MALLOC_MMAP_THRESHOLD_": "131072",
           "PYTHONPATH": os.pathsep.join([str(engine.python_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD, "solver.prototxt"], cwd=folder, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RunError(f"measuring failed: {last_lines(done.stderr)}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare(folder: Path, caffe: Any, net: Any, solver_type: str, input_shape: tuple[int, int, int],
            classes: int, mode: str) -> None:
    """``folder/solver.prototxt`` and its net, reading a fresh LMDB: one test pass, one step."""
    pb = caffe.proto.caffe_pb2
    batches = [layer.data_param.batch_size for layer in net.layer if layer.type == "Data"]
    make_lmdb(folder / "images", max(batches + [1]) + 2, input_shape, classes, caffe)
    for layer in net.layer:
        if layer.type == "Data":
            layer.data_param.source = str(folder / "images")
            layer.data_param.backend = pb.DataParameter.LMDB
    (folder / "net.prototxt").write_text(str(net))
    solver_mode = pb.SolverParameter.GPU if mode == "gpu" else pb.SolverParameter.CPU
    solver = pb.SolverParameter(net="net.prototxt", base_lr=0.001, lr_policy="fixed",
                                max_iter=gpumeasure.STEPS if mode == "gpu" else 1,
                                test_interval=1000, snapshot_after_train=False, solver_mode=solver_mode)
    solver.test_iter.append(1)
    if solver_type != "SGD":
        solver.type = solver_type
    solver.momentum = 0.0 if solver_type in ("AdaGrad", "RMSProp") else 0.9
    (folder / "solver.prototxt").write_text(str(solver))
