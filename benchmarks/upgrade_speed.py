"""``caffetool upgrade`` of many small Python 2 scripts against 2to3 itself on the same files.

Builds ``--files`` Python 2 scripts in a temporary folder, 100 to a subfolder: ``--kind small``
(default), four lines each (a print statement, ``xrange``, an integer division, a ``caffe.Net``
without its phase); ``--kind long``, 18 lines each, with ``dict.iteritems()``, ``except E, e``,
``string.join`` and ``net.set_mode_gpu()`` as well. Then times, each as a child process from start
to exit:

* ``caffetool upgrade DIR`` (the whole command: a copy beside the folder, every file converted,
  checked as Python 3, the report written);
* the reference, plain 2to3: fissix's own command line, ``python -m fissix -w -n --no-diffs DIR`` (all its
  default fixers, writing in place without backups) on a copy of the folder, one process as
  caffetool's.

Both sides read and write every file. Prints both times and the ratio (caffetool's time over
2to3's). Checks that every converted file parses as Python 3.

    .venv/bin/python benchmarks/upgrade_speed.py [--files N] [--kind small|long]
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Run

SMALL = '''import caffe
net = caffe.Net("net{n}.prototxt", "w{n}.caffemodel")
for i in xrange({n} % 7 + 1):
    print "iteration", i, i / 2
'''
LONG = '''import string
import caffe

def run(net, steps):
    # the old pycaffe calls
    net.set_mode_gpu()
    seen = {{}}
    for i in xrange(steps):
        seen[i] = i / 2
    for k, v in seen.iteritems():
        print "step", k, v
    try:
        return string.join(map(str, seen.keys()), ",")
    except ValueError, e:
        print e

print run(caffe.Net("net{n}.prototxt", "w{n}.caffemodel"), {n})
'''


def build(folder: Path, files: int, script: str) -> None:
    """``files`` scripts in ``folder``, 100 to a subfolder, as a project keeps them."""
    for n in range(files):
        sub = folder / f"part{n // 100:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"script{n:05d}.py").write_text(script.format(n=n))


def timed(argv: list[str], log: Path) -> Run:
    """Wall time and peak RSS of one child process, its output to ``log`` (2to3 logs every file it
    refactors: a pipe nobody reads would fill and stop it)."""
    start = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[0]} failed: {log.read_text()[-500:]}")
    return Run(seconds, usage.ru_maxrss / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000, help="how many scripts (default 10,000)")
    parser.add_argument("--kind", choices=("small", "long"), default="small", help="the scripts' size (default small)")
    args = parser.parse_args()
    caffetool = Path(sys.executable).with_name("caffetool")
    with tempfile.TemporaryDirectory() as temp:
        project = Path(temp) / "project"
        project.mkdir()
        build(project, args.files, SMALL if args.kind == "small" else LONG)
        reference = Path(temp) / "reference"
        shutil.copytree(project, reference)
        ours = timed([str(caffetool), "upgrade", str(project)], Path(temp) / "ours.log")
        theirs = timed([sys.executable, "-m", "fissix", "-w", "-n", "--no-diffs", str(reference)],
                       Path(temp) / "theirs.log")
        upgraded = Path(temp) / "project-upgraded"
        for copy in (upgraded, reference):
            for script in copy.rglob("*.py"):
                ast.parse(script.read_text(), str(script))
        print(f"{args.files:,} {args.kind} scripts: caffetool upgrade {ours.seconds:.1f} s (peak RSS {ours.peak_rss_mb:.0f} MiB), "
              f"2to3 (python -m fissix -w -n --no-diffs) {theirs.seconds:.1f} s (peak RSS {theirs.peak_rss_mb:.0f} MiB), "
              f"ratio {ours.seconds / theirs.seconds:.2f}")


if __name__ == "__main__":
    main()
