"""OpenCV 4's own Caffe importer as a benchmark side, in a child process of its own.

OpenCV 4 and OpenCV 5 are both ``cv2``: one process holds one of them. :mod:`ssd_speed` starts this
script with OpenCV 4's wheel first on ``PYTHONPATH`` and talks to it over its standard streams, so
OpenCV 4 takes its turns among the other sides of one run. Protocol, one JSON object per line: the
child answers ``{"ready": version}`` once ``readNetFromCaffe`` has read the net; each request
``{"passes": N}`` is answered with ``{"ms": [...], "rows": [[...], ...]}``: N passes timed one by
one and the detection rows of the last.

    python benchmarks/opencv4_side.py DEPLOY WEIGHTS INPUT.npy
"""

from __future__ import annotations

import json
import sys
import time

import cv2
import numpy as np


def main() -> None:
    deploy, weights, blob = sys.argv[1:4]
    net = cv2.dnn.readNetFromCaffe(deploy, weights)
    x = np.load(blob)
    print(json.dumps({"ready": cv2.__version__}), flush=True)
    for line in sys.stdin:
        passes = int(json.loads(line)["passes"])
        times, out = [], None
        for _ in range(passes):
            start = time.perf_counter()
            net.setInput(x)
            out = net.forward()
            times.append((time.perf_counter() - start) * 1000)
        rows = [] if out is None else out.reshape(-1, 7).tolist()
        print(json.dumps({"ms": times, "rows": rows}), flush=True)


if __name__ == "__main__":
    main()
