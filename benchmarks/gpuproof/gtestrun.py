"""The ``gtest`` group, on the GPU machine: Caffe's own test suite of the payload's build, continued
across calls.

The suite (CPU and GPU tests) runs in ``shards`` processes on the one GPU, under NVIDIA's
Multi-Process Service where the machine has it; a call given the names finished in earlier calls
(``--done``) runs only the rest (:mod:`gpuproof.gtestlist`). Every failed test runs once more
alone: a test that passes alone failed only for the company (the timer tests measure wall time).
The call leaves ``gtest_done.txt`` (every finished name, earlier ones included: the next call's
``--done``) and ``gtest_failed.txt`` (this call's failures, each marked with its run alone) in
``--out``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from gpuproof import gtestlist
from gpuproof.payload import WORK
from gpuproof.proof import Proof

DONE = "gtest_done.txt"
FAILED = "gtest_failed.txt"


def gtest(proof: Proof, shards: int, done_file: Path | None = None) -> None:
    import zstandard

    root = WORK / "gtest"
    binary = root / "bin" / "test.testbin"
    source = Path((proof.payload / "gtest" / "gtest.txt").read_text().strip())
    done_before = gtestlist.read_names(done_file) if done_file else set()
    remaining: list[str] = []

    def unpack(entry: dict) -> None:
        with open(proof.payload / "gtest" / "gtest.tar.zst", "rb") as raw, \
                zstandard.ZstdDecompressor().stream_reader(raw) as zst, tarfile.open(fileobj=zst, mode="r|") as tar:
            tar.extractall(root)
        shutil.copytree(root / source.relative_to("/") / "src", source / "src", dirs_exist_ok=True)
        binary.chmod(0o755)
        entry["source"] = str(source)

    def listing(entry: dict) -> None:
        done = subprocess.run([str(binary), "--gtest_list_tests"], cwd=source, capture_output=True, text=True,
                              env=proof.env, timeout=120)
        names = gtestlist.listed(done.stdout)
        remaining.extend(name for name in names if name not in done_before)
        entry.update(exit=done.returncode, listed=len(names), done_before=len(done_before),
                     done_before_not_listed=len(done_before - set(names)), remaining=len(remaining))

    def suite(entry: dict) -> None:
        start = time.perf_counter()
        parts = gtestlist.shards(remaining, shards)
        mps = start_mps()
        entry["mps"] = mps is not None
        procs = []
        for index, names in enumerate(parts):
            log = open(proof.log(f"gtest_shard{index}"), "w")
            procs.append((subprocess.Popen([str(binary), gtestlist.gtest_filter(names)], cwd=source, stdout=log,
                                           stderr=subprocess.STDOUT, env={**proof.env, **(mps or {})}), log))
        codes: list[int | str] = []
        for proc, log in procs:
            try:
                codes.append(proc.wait(timeout=max(5.0, proof.left() - 60)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes.append("killed at the time limit")
            log.close()
        stop_mps(mps)
        ok: list[str] = []
        failed: list[str] = []
        aborted: list[str] = []  # a shard that died (a CHECK aborts the binary, or the time limit): its test
        for index in range(len(parts)):
            text = proof.log(f"gtest_shard{index}").read_text(errors="replace")
            passed, broke = gtestlist.finished(text)
            ok += passed
            failed += [name for name in broke if name not in failed]
            if (stopped := gtestlist.stopped_in(text)) is not None:
                aborted.append(stopped)
        entry.update(shards=len(parts), exits=codes, seconds=round(time.perf_counter() - start, 1),
                     tests_run=len(ok) + len(failed), tests_ok=len(ok), failed=failed, aborted=aborted,
                     not_reached=len(remaining) - len(ok) - len(failed) - len(aborted))
        gtestlist.write_names(proof.out / DONE, done_before | set(ok) | set(failed))

    def rerun(entry: dict) -> None:
        first = proof.results["caffe_test_suite"]
        again = first["failed"] + first["aborted"]
        with open(proof.log("gtest_rerun"), "w") as log:
            code = subprocess.run([str(binary), gtestlist.gtest_filter(again)], cwd=source, stdout=log,
                                  stderr=subprocess.STDOUT, env=proof.env,
                                  timeout=max(5.0, proof.left() - 10)).returncode
        passed, _ = gtestlist.finished(proof.log("gtest_rerun").read_text(errors="replace"))
        entry.update(exit=code, tests_ok=len(passed), still_failed=sorted(set(again) - set(passed)))
        (proof.out / FAILED).write_text("".join(
            f"{name}  # {'passed alone' if name in passed else 'failed alone too'}"
            f"{' (its shard stopped in it)' if name in first['aborted'] else ''}\n" for name in again))

    proof.do("gtest_unpack", unpack)
    proof.do("gtest_list", listing, 30)
    proof.do("caffe_test_suite", suite, 60)
    first = proof.results["caffe_test_suite"]
    if first.get("failed") or first.get("aborted"):
        (proof.out / FAILED).write_text("".join(f"{name}\n" for name in first["failed"] + first["aborted"]))
        proof.do("caffe_test_suite_rerun", rerun, 20)


def start_mps() -> dict[str, str] | None:
    """NVIDIA's Multi-Process Service for the shards, where the machine has it: without it the
    shards' contexts take turns on the GPU in time slices, and the suite's GPU tests (gradient checks:
    thousands of tiny kernels, each followed by a wait) ran 100-190 s each in 12 shards (record of
    2026-11-27) instead of running side by side. The environment the shards need, or None."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return None
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(WORK / "mps-pipe"), "CUDA_MPS_LOG_DIRECTORY": str(WORK / "mps-log")}
    for folder in env.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    done = subprocess.run([control, "-d"], env={**os.environ, **env}, capture_output=True, text=True)
    return env if done.returncode == 0 else None


def stop_mps(env: dict[str, str] | None) -> None:
    if env is not None:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env={**os.environ, **env},
                       capture_output=True, timeout=30)
