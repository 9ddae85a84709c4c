"""``./bootstrap quickstart`` on a fresh Debian 12 machine, as the README's first command runs there.

The machine is a ``debian:12`` container (debootstrap minbase: no Python, no compiler, no
caffetool package installed) on a private Docker daemon (``private_docker.py``), with this
machine's cores and network: Debian's archive, and PyPI as pip is configured here (``/etc/pip.conf``,
its constraints, local wheel folders and certificate authorities, handed in read-only). The project
is a fresh ``git clone`` of this checkout's HEAD, and the container's home, where caffetool keeps
its caches and its engine, starts empty. Both are folders of the host, so the phases are read from
the files each one leaves, as they appear: the venv's Python (apt's Python and the venv), pip's
install stamp (pip, apt installing the engine's build packages beside it), the engine's manifest
(its build); the rest is the data, the engine check and the training. Python's output is
unbuffered, so each line is stamped when it is printed.

Prints the transcript with the seconds since the start of each line, then the phases; writes both
to ``benchmarks/build/quickstart-fresh-DATE.txt``.

    sudo .venv/bin/python benchmarks/quickstart_fresh.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import private_docker

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "caffetool-fresh-debian:12"
# What makes pip on this machine reach PyPI, given to the container as it is (read-only).
PIP_SETUP = ("/etc/pip.conf", "/etc/xdg/pip", "/opt/pypi", "/opt/pypi-more", "/opt/wheels",
             "/usr/local/share/ca-certificates")
# (phase, the file that ends it, relative to the project or to the container's home)
MILESTONES = (
    ("Python and the venv", "project", ".venv/bin/python"),
    ("pip (apt's build packages beside it)", "project", ".venv/.caffetool-installed"),
    ("the engine", "home", ".local/share/caffetool/engine/caffetool-engine.json"),
)
LAST = "the data, the engine check and the training"  # to the end


def watch(folders: dict[str, Path], start: float, seen: dict[str, float], done: threading.Event) -> None:
    """The second each milestone's file first exists."""
    while not done.is_set():
        for phase, where, pattern in MILESTONES:
            if phase not in seen and any(folders[where].glob(pattern)):
                seen[phase] = time.monotonic() - start
        time.sleep(0.5)


def quickstart(env: dict[str, str], project: Path, home: Path, out: list[str]) -> tuple[int, float, dict]:
    mounts = [arg for path in PIP_SETUP if Path(path).exists() for arg in ("-v", f"{path}:{path}:ro")]
    pip_env = [arg for name, value in os.environ.items() if name.startswith("PIP_") for arg in ("-e", f"{name}={value}")]
    argv = ["docker", "run", "--rm", "--network", "host", "-e", "PYTHONUNBUFFERED=1", "-v", f"{project}:/work", "-v", f"{home}:/root",
            *mounts, *pip_env, "-w", "/work", IMAGE, "./bootstrap", "quickstart"]
    seen: dict[str, float] = {}
    done = threading.Event()
    start = time.monotonic()
    watcher = threading.Thread(target=watch, args=({"project": project, "home": home}, start, seen, done))
    watcher.start()
    try:
        child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in child.stdout:
            stamped = f"{time.monotonic() - start:6.0f} {line.rstrip()}"
            print(stamped, flush=True)
            out.append(stamped)
        code = child.wait()
    finally:
        done.set()
        watcher.join()
    return code, time.monotonic() - start, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="the transcript (default benchmarks/build/quickstart-fresh-DATE.txt)")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    out_file = args.out or ROOT / "benchmarks" / "build" / f"quickstart-fresh-{dt.date.today()}.txt"
    scratch = Path(tempfile.mkdtemp(prefix="quickstart-fresh-"))
    lines = [f"# ./bootstrap quickstart in a fresh debian:12 container (debootstrap minbase, no Python), fresh "
             f"clone of {head}, empty caches and home; {os.cpu_count()} cores; first column: seconds since the start"]
    try:
        project, home = scratch / "project", scratch / "home"
        home.mkdir()
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(project)], check=True)
        with private_docker.daemon(scratch / "dockerd") as env:
            private_docker.debian_image(env, IMAGE, scratch)
            code, total, seen = quickstart(env, project, home, lines)
            manifests = sorted(project.glob("runs/*/manifest.json"))
            final = json.loads(manifests[-1].read_text()).get("final", {}) if manifests else {}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = [f"exit status {code}; total {total:.0f} s"]
    previous = 0.0
    for phase, _, _ in MILESTONES:
        if phase in seen:
            summary.append(f"{phase}: {seen[phase] - previous:.0f} s (done at {seen[phase]:.0f} s)")
            previous = seen[phase]
    summary.append(f"{LAST}: {total - previous:.0f} s")
    summary.append(f"final: {json.dumps(final)}")
    print("\n".join(summary))
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text("\n".join(lines + ["", *summary]) + "\n")
    print(f"transcript: {out_file}")
    sys.exit(code)


if __name__ == "__main__":
    main()
