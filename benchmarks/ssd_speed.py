"""OpenCV's res10 SSD face detector at batch 1 on 300x300: pycaffe, onnxruntime, OpenCV 5 and PyTorch on
caffetool's verified exports, and OpenCV 4's own Caffe importer as the reference, in one run.

The model is the published one (:mod:`facedetector`: ``res10_300x300_ssd_iter_140000.caffemodel`` and
its ``deploy.prototxt``), exported by ``caffetool.export`` to ONNX (batch 1) and to PyTorch, each
verified against the engine first. The input is scikit-image's ``astronaut`` as OpenCV's sample
prepares it (resized to 300x300, BGR, minus the mean 104, 177, 123), the same array on every side.

The sides: ``pycaffe`` (the engine, its ``DetectionOutput`` included), ``onnxruntime`` and
``opencv`` (OpenCV 5's ``readNetFromONNX``) on the ONNX export, ``pytorch`` on the exported
``model.py``, and ``opencv4``: OpenCV 4's ``readNetFromCaffe`` of the published files, the importer
OpenCV 5 removed, in a child process (:mod:`opencv4_side`; one process holds one OpenCV) whose wheel
is installed from PyPI into the user's cache on first use. As in :mod:`export_speed`, after warm-up
the sides take turns of ``--settle`` untimed and ``--block`` timed passes, the order rotated every
round; figures are medians; each ratio is pycaffe's time over the side's (above 1: faster than
pycaffe); "others" is the CPU time other programs took meanwhile. Every side's detections of its
last pass are compared with pycaffe's: rows above confidence 0.5, and the largest difference of
confidence and box over all rows.

    .venv/bin/python benchmarks/ssd_speed.py [--sides pycaffe,onnxruntime,opencv,pytorch,opencv4]
        [--repeats N] [--warmup N] [--block N] [--settle N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks.*, run as a script
from benchmarks import facedetector  # noqa: E402
from benchmarks.export_speed import (Exports, chosen_sides, cpu_model, onnxruntime_side, opencv_side, others_cpu_s,  # noqa: E402
                                     physical_cores, pycaffe_side, pytorch_side, timed_ms, versions)

from caffetool import fsio  # noqa: E402
from caffetool.engine import cpu_threads, import_caffe, locate  # noqa: E402
from caffetool.errors import CaffetoolError  # noqa: E402
from caffetool.export import exporter  # noqa: E402
from caffetool.inference.modelfiles import ModelFiles  # noqa: E402

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "export"
SIDES = ("pycaffe", "onnxruntime", "opencv", "pytorch", "opencv4")
OPENCV4 = "opencv-python-headless>=4.8,<5"
SHOWN = 0.5  # the confidence OpenCV's sample draws from


def opencv4_dir() -> Path:
    """OpenCV 4's wheel unpacked in the user's cache (installed from PyPI on first use)."""
    folder = facedetector.cache_dir().parent / "opencv4"
    if not (folder / "cv2").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder),
                        OPENCV4], check=True, timeout=900)
    return folder


class Opencv4Side:
    """The child running OpenCV 4 (:mod:`opencv4_side`); ``run(n)`` times n passes there."""

    def __init__(self, deploy: Path, weights: Path, x: np.ndarray, folder: Path) -> None:
        np.save(folder / "input.npy", x)
        env = {**os.environ, "PYTHONPATH": str(opencv4_dir())}
        self.child = subprocess.Popen([sys.executable, str(HERE / "opencv4_side.py"), str(deploy), str(weights),
                                       str(folder / "input.npy")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env=env)
        self.version = json.loads(self.child.stdout.readline())["ready"]

    def run(self, passes: int) -> tuple[list[float], np.ndarray]:
        self.child.stdin.write(json.dumps({"passes": passes}) + "\n")
        self.child.stdin.flush()
        answer = json.loads(self.child.stdout.readline())
        return answer["ms"], np.asarray(answer["rows"], np.float32).reshape(-1, 7)

    def close(self) -> None:
        self.child.stdin.close()
        self.child.wait(timeout=30)


def in_process(step: Callable[[], Any]) -> Callable[[int], tuple[list[float], np.ndarray]]:
    """An in-process side as the child's interface: n passes timed, the last one's rows."""
    def run(passes: int) -> tuple[list[float], np.ndarray]:
        times, out = [], None
        for _ in range(passes):
            ms, out = timed_ms(step)
            times.append(ms)
        return times, np.asarray(out, np.float32).reshape(-1, 7)
    return run


def detections(rows: np.ndarray) -> np.ndarray:
    """The rows that are detections: OpenCV 4 pads its output to ``keep_top_k`` rows of zeros, and Caffe
    writes one row of -1 when it keeps nothing; a kept detection's confidence is above 0."""
    return rows[rows[:, 2] > 0]


def compared(rows: np.ndarray, reference: np.ndarray) -> dict:
    """A side's detections against pycaffe's: counts above SHOWN, and the largest differences over all rows."""
    rows, reference = detections(rows), detections(reference)
    shown = int((rows[:, 2] > SHOWN).sum())
    found = {"rows": len(rows), "shown": shown, "same_rows": rows.shape == reference.shape}
    if rows.shape == reference.shape and len(rows):
        found["labels_equal"] = bool(np.array_equal(rows[:, 1], reference[:, 1]))
        found["max_confidence_diff"] = float(np.abs(rows[:, 2] - reference[:, 2]).max())
        found["max_box_diff"] = float(np.abs(rows[:, 3:] - reference[:, 3:]).max())
    return found


def exports(engine: Any, deploy: Path, weights: Path, folder: Path, sides: tuple[str, ...]) -> Exports:
    files = ModelFiles(deploy, weights, labels=None)
    figures, models = {}, {}
    for to, suffix, wanted in (("onnx", ".onnx", {"onnxruntime", "opencv"}), ("pytorch", ".py", {"pytorch"})):
        models[to] = folder / f"res10{suffix}"
        if not wanted & set(sides):
            continue
        started = time.perf_counter()
        result = exporter.export(engine, exporter.ExportRequest(files, models[to], batch=1, to=to), say=lambda _: None)
        figures[to] = {"seconds": round(time.perf_counter() - started, 2),
                       "verification": result.verification.summary(),
                       "max_rel_error": max(f.rel for f in result.verification.layers)}
    return Exports(deploy, weights, models["onnx"], models["pytorch"], figures)


def run(args: argparse.Namespace, sides: tuple[str, ...]) -> dict:
    threads = cpu_threads.apply(None)
    wait = cpu_threads.for_serving()
    engine = locate(probe=False)
    caffe = import_caffe(engine)
    caffe.set_mode_cpu()
    deploy, weights = facedetector.files()
    cores = cpu_threads.available()
    notes = {"cpu": cpu_model(), "cores": os.cpu_count(), "available_cores": cores,
             "physical_cores": physical_cores(), "caffe_threads": threads, "openmp_wait": wait,
             "load_average_before": os.getloadavg()}
    vers = versions(engine)
    print(f"{notes['cpu']}, {notes['cores']} cores; pycaffe on {threads} threads; load average "
          f"{notes['load_average_before'][0]:.2f} at the start")
    with tempfile.TemporaryDirectory(prefix="caffetool-ssd-speed-") as tmp:
        folder = Path(tmp)
        x = facedetector.blob(cv2.imread(str(facedetector.photo("astronaut", folder))))
        e = exports(engine, deploy, weights, folder, sides)
        for to, f in e.figures.items():
            print(f"{to} export in {f['seconds']:.1f} s: {f['verification']}, layers within {f['max_rel_error']:.2g}")
        makers: dict[str, Callable[[], Any]] = {
            "pycaffe": lambda: in_process(pycaffe_side(caffe, e, x)),
            "onnxruntime": lambda: in_process(onnxruntime_side(e, x)),
            "opencv": lambda: in_process(opencv_side(e, x)),
            "pytorch": lambda: in_process(pytorch_side(e, x))}
        children = []
        runs = {}
        for side in sides:
            if side == "opencv4":
                child = Opencv4Side(deploy, weights, x, folder)
                children.append(child)
                vers["opencv4"] = child.version
                runs[side] = child.run
            else:
                runs[side] = makers[side]()
        try:
            for run_side in runs.values():
                run_side(args.warmup)
            ms: dict[str, list[float]] = {side: [] for side in sides}
            last: dict[str, np.ndarray] = {}
            others, started = others_cpu_s(), time.perf_counter()
            for turn in range((args.repeats + args.block - 1) // args.block):
                count = min(args.block, args.repeats - turn * args.block)
                for side in sides[turn % len(sides):] + sides[:turn % len(sides)]:
                    if args.settle:
                        runs[side](args.settle)
                    times, last[side] = runs[side](count)
                    ms[side] += times
            others_s, wall = others_cpu_s() - others, time.perf_counter() - started
        finally:
            for child in children:
                child.close()
    medians = {side: float(np.median(times)) for side, times in ms.items()}
    summary = {side: {"ms": medians[side], "over_pycaffe": medians["pycaffe"] / medians[side],
                      "detections": compared(last[side], last["pycaffe"])} for side in sides}
    busy = 100 * others_s / (wall * cores) if wall else 0.0
    print(f"\n{'side':<12} {'ms':>8} {'pycaffe/side':>12} {'faces>0.5':>9} {'rows':>5} {'max conf diff':>13} "
          f"{'max box diff':>12}")
    for side, s in summary.items():
        d = s["detections"]
        print(f"{side:<12} {s['ms']:>8.2f} {s['over_pycaffe']:>12.2f} {d['shown']:>9} {d['rows']:>5} "
              f"{d.get('max_confidence_diff', float('nan')):>13.2e} {d.get('max_box_diff', float('nan')):>12.2e}")
    print(f"median ms per pass over {args.repeats} passes each (turns of {args.settle} + {args.block}, "
          f"{args.warmup} warm-up); others took {busy:.1f}% of the cores meanwhile; {wall:.0f} s timed")
    return {"settings": vars(args) | {"json": str(args.json), "sides": list(sides)}, "date": date.today().isoformat(),
            "notes": notes, "versions": vers, "exports": e.figures, "ms": ms, "summary": summary,
            "others_cpu_percent": round(busy, 1), "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, pycaffe and any of "
                                                                  f"{', '.join(SIDES[1:])}")
    parser.add_argument("--repeats", type=int, default=100, help="timed passes per side")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up passes per side")
    parser.add_argument("--block", type=int, default=10, help="timed passes per turn")
    parser.add_argument("--settle", type=int, default=1, help="untimed passes opening each turn")
    parser.add_argument("--json", type=Path, default=RECORDS / f"ssd-speed-{date.today().isoformat()}.json",
                        help="record file (default: benchmarks/export/ssd-speed-DATE.json)")
    args = parser.parse_args()
    if min(args.repeats, args.block) < 1 or min(args.warmup, args.settle) < 0:
        parser.error("--repeats and --block must be at least 1, --warmup and --settle at least 0")
    sides = chosen_sides(args.sides, parser, SIDES)
    try:
        figures = run(args, sides)
        fsio.write_atomic(args.json, json.dumps(figures, indent=2) + "\n", CaffetoolError)
    except CaffetoolError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"figures -> {args.json}")


if __name__ == "__main__":
    main()
