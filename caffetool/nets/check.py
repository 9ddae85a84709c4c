"""Validation by Caffe itself, in a child process.

Caffe reports bad nets with glog ``CHECK`` failures, which abort the process; building the nets in
a child keeps the caller alive and turns the ``F...`` line into a caffetool error. The child builds
the solver (so both the TRAIN and the TEST net, with their data layers) and any deploy nets, and
prints what it built as JSON.

    python -m caffetool.nets.check [--solver S] [--deploy D ...]   (paths relative to the cwd)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from caffetool.engine import EngineInfo
from caffetool.errors import ConfigError

FATAL = re.compile(r"^F\d{4,8} [\d:.]+ +\d+ (\S+)\] (.*?)\s*$", re.M)


def summary(net) -> dict:
    params = sum(blob.data.size for blobs in net.params.values() for blob in blobs)
    return {
        "layers": len(net.layers),
        "params": int(params),
        "param_shapes": {name: [list(b.data.shape) for b in blobs] for name, blobs in net.params.items()},
        "blobs": {name: list(blob.data.shape) for name, blob in net.blobs.items()},
    }


def validate(engine: EngineInfo, cwd: Path, solver: str | None = None, deploy: list[str] = (),
             weights: str | None = None) -> dict:
    """Build ``solver`` (train and test nets) and each deploy net (with ``weights``) in Caffe."""
    argv = [sys.executable, "-m", "caffetool.nets.check"]
    if weights:
        argv += ["--weights", weights]
    if solver:
        argv += ["--solver", solver]
    for d in deploy:
        argv += ["--deploy", d]
    env = {**os.environ, "GLOG_minloglevel": "1", "PYTHONPATH": os.pathsep.join(
        [str(engine.python_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        fatal = FATAL.findall(done.stderr)
        if fatal:
            where, what = fatal[-1]
            subject = f"the net with weights {weights}" if weights else "the net"
            raise ConfigError(f"Caffe refused {subject} ({where}): {what}")
        tail = "\n".join(done.stderr.strip().splitlines()[-4:])
        raise ConfigError(f"Caffe could not build the net:\n{tail}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--solver")
    parser.add_argument("--deploy", action="append", default=[])
    parser.add_argument("--weights")
    args = parser.parse_args()
    import caffe  # noqa: PLC0415 - on PYTHONPATH from validate()

    caffe.set_mode_cpu()
    report: dict = {}
    if args.solver:
        solver = caffe.get_solver(args.solver)
        report["train"] = summary(solver.net)
        report["test"] = [summary(net) for net in solver.test_nets]
    report["deploy"] = {
        d: summary(caffe.Net(d, args.weights, caffe.TEST) if args.weights else caffe.Net(d, caffe.TEST))
        for d in args.deploy
    }
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
