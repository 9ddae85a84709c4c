"""Every task, given what a careless or hostile user might type, through the real ``invoke`` command:
one ``Error: ...`` line naming the flag, file or setting and what would be accepted, exit code 1, and
never a Python traceback.

Each case fails before any slow work (no build, no download, no training), so the table runs in a
minute. ``INVOKE_DATA_DIR`` and ``INVOKE_RUNS_DIR`` point into the test's own folder, so nothing
outside it is read or written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import PROJECT

INVOKE = Path(sys.executable).parent / "invoke"
PROJECT_DIR = str(PROJECT)


def invoke(*args: str, cwd: Path = PROJECT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real command line, as a user runs it from the venv."""
    return subprocess.run([str(INVOKE), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": PROJECT_DIR, **(env or {})}, stdin=subprocess.DEVNULL)


@pytest.fixture
def place(tmp_path: Path) -> dict[str, str]:
    """Paths the cases refer to: a plain file, a binary and an empty prototxt, a missing file, a folder."""
    (tmp_path / "plain.txt").write_text("not a folder\n")
    (tmp_path / "binary.prototxt").write_bytes(b"\x00\x01\xff\xfe\x89PNG binary")
    (tmp_path / "empty.prototxt").write_text("  \n")
    (tmp_path / "folder").mkdir()
    return {"file": str(tmp_path / "plain.txt"), "bin": str(tmp_path / "binary.prototxt"),
            "empty": str(tmp_path / "empty.prototxt"), "none": str(tmp_path / "missing"),
            "dir": str(tmp_path / "folder"), "tmp": str(tmp_path)}


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    return {"INVOKE_DATA_DIR": str(tmp_path / "data"), "INVOKE_RUNS_DIR": str(tmp_path / "runs")}


def folder_fix(flag: str, setting: str = "") -> str:
    return f"give a folder you can write to with {flag}" + (f" (or {setting} in invoke.yaml)" if setting else "")


# (command line, the error line after "Error: "); {file}, {bin}, {empty}, {none}, {dir}, {tmp} are
# filled in from the `place` fixture.
CASES = [
    # numbers
    (["quickstart", "--max-iter", "abc"], "--max-iter 'abc' is not a number"),
    (["engine.install", "--jobs", "0"], "--jobs must be a number of compile jobs from 1 to 4096, got 0"),
    (["engine.install", "--jobs", "abc"], "--jobs 'abc' is not a number"),
    (["engine.check", "--iterations", "abc"], "--iterations 'abc' is not a number"),
    (["engine.check", "--iterations", "0"], "--iterations must be at least 1, got 0"),
    (["engine.bundle", "--level", "abc"], "--level 'abc' is not a number"),
    (["engine.compile-check", "--jobs", "-2"], "--jobs must be a number of compile jobs from 1 to 4096, got -2"),
    (["data.fetch", "--timeout", "abc"], "--timeout 'abc' is not a number"),
    (["data.fetch", "--timeout", "-1"], "--timeout must be a number of seconds above 0, got -1.0"),
    (["data.fetch", "--timeout", "nan"], "--timeout 'nan' is not a finite number"),
    (["data.info", "--per-class", "x"], "--per-class 'x' is not a number"),
    (["data.info", "--per-class", "0"], "--per-class must be a number of samples per class from 1 to 1000, got 0"),
    (["demo.serve", "--port", "abc"], "--port 'abc' is not a number"),
    (["demo.serve", "--port", "99999"], "--port must be a TCP port from 1 to 65535, got 99999"),
    (["demo.serve", "--port", "80.5"], "--port '80.5' is not a whole number"),
    (["demo.serve", "--workers", "0"], "--workers must be a number of server processes from 1 to 64, got 0"),
    (["demo.serve", "--max-body", "abc"], "--max-body 'abc' is not a number"),
    (["demo.serve", "--max-body", "-1"], "--max-body must be a size in bytes from 1 to 2147483647, got -1"),
    (["demo.serve", "--deploy", "{file}", "--weights", "{file}", "--labels", "{file}", "--scale", "abc"],
     "--scale 'abc' is not a number"),
    (["demo.serve", "--deploy", "{file}", "--weights", "{file}", "--labels", "{file}", "--scale", "0"],
     "--scale must be an input scale above 0, got 0.0"),
    (["demo.classify", "{file}", "--top", "abc"], "--top 'abc' is not a number"),
    (["docker.demo", "--port", "abc"], "--port 'abc' is not a number"),
    (["docker.demo", "--port", "0"], "--port must be a TCP port from 1 to 65535, got 0"),
    (["memory.estimate", "--model", "lenet", "--input-shape", "0,28,28"], "--input-shape must be at least 1, got 0"),
    (["memory.estimate", "--model", "lenet", "--input-shape", "1,a,28"], "--input-shape 'a' is not a number"),
    (["memory.fit", "--model", "lenet", "--gpu-memory", "1.2.3GiB"], "--gpu-memory '1.2.3' is not a number"),
    (["memory.fit", "--model", "lenet", "--gpu-memory", "1e400GiB"], "--gpu-memory '1e400' is not a finite number"),
    (["memory.fit", "--model", "lenet", "--gpu-memory", "-5GiB"],
     "--gpu-memory '-5GiB' is not a size; write it like 12GiB, 11264MiB or 400MB"),
    (["memory.fit", "--model", "lenet", "--gpu", "K40", "--reserve", "lots"],
     "--reserve 'lots' is not a size; write it like 12GiB, 11264MiB or 400MB"),
    # names, in any case, with the choices listed
    (["data.mean", "--split", "validation"], "unknown --split 'validation'; choose one of: train, test"),
    (["model.generate", "--model", "lenet", "--type", "Lion"],
     "unknown --type 'Lion'; choose one of: SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam"),
    (["memory.estimate", "--model", "lenet", "--type", "momentum"],
     "unknown --type 'momentum'; choose one of: SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam"),
    (["demo.serve", "--backend", "tensorflow"], "unknown --backend 'tensorflow'; choose one of: caffe, opencv, onnxruntime, pytorch"),
    (["demo.classify", "{file}", "--backend", "tf"], "unknown --backend 'tf'; choose one of: caffe, opencv, onnxruntime, pytorch"),
    (["docker.build", "--variant", "GPU", "--ubuntu", "20.04"],
     "unknown --ubuntu '20.04'; choose one of: 22.04, 24.04"),
    (["memory.fit", "--model", "lenet", "--gpu", "Voodoo2"],
     "unknown --gpu 'Voodoo2'; choose one of: GTX 980, GTX 1080, GTX 1080 Ti, Titan X, K40, K80, M40, M40 24GB, "
     "P100, V100, V100 32GB, T4, A100 40GB, A100 80GB, H100 (or give --gpu-memory 12GiB)"),
    # text that must parse
    (["test", "--args", '-k "engine'], "--args '-k \"engine': no closing quotation"),
    (["docker.train", "--args", "--name 'x"], "--args \"--name 'x\": no closing quotation"),
    # files to read
    (["data.convert", "{none}", "{none}", "{tmp}/out"], "--images {none} does not exist"),
    (["data.convert", "{file}", "{dir}", "{tmp}/out"], "--labels {dir} is a folder; give a file"),
    (["model.generate", "--net", "{bin}"],
     "{bin} is not a text file; a prototxt is text (a binary .caffemodel goes in --weights)"),
    (["model.generate", "--net", "{empty}"], "{empty} is empty; a prototxt describes a net or a solver"),
    (["model.generate", "--model", "lenet", "--net", "{empty}"], "give exactly one of --model NAME or --net FILE"),
    (["model.generate"], "give exactly one of --model NAME or --net FILE"),
    (["memory.estimate", "--net", "{bin}"],
     "{bin} is not a text file; a prototxt is text (a binary .caffemodel goes in --weights)"),
    (["memory.estimate", "--net", "{empty}"], "{empty} is empty; a prototxt describes a net or a solver"),
    (["demo.classify", "{dir}"], "IMAGES '{dir}' names no files; give image files, comma-separated, or a folder"),
    (["demo.classify", ","], "IMAGES ',' names no files; give image files, comma-separated, or a folder"),
    (["demo.classify", "{file}", "--deploy", "{none}", "--weights", "{file}", "--labels", "{file}"],
     "--deploy {none} does not exist"),
    (["demo.classify", "{file}", "--deploy", "{bin}", "--weights", "{bin}", "--labels", "{bin}"],
     "{bin} is not a text file; a prototxt is text (a binary .caffemodel goes in --weights)"),
    # folders and files to write
    (["engine.install", "--prefix", "{file}"],
     "--prefix {file} is a file, not a folder; " + folder_fix("--prefix", "engine.prefix")),
    (["engine.bundle", "--out", "{dir}"], "--out {dir} is a folder; give a file name"),
    (["data.fetch", "--data-dir", "{file}"],
     "--data-dir {file} is a file, not a folder; " + folder_fix("--data-dir", "data.dir")),
    (["data.fetch", "--data-dir", "{file}/deeper"],
     "--data-dir {file}/deeper: {file} is a file, not a folder; " + folder_fix("--data-dir", "data.dir")),
    (["data.info", "--data-dir", "{file}"],
     "--data-dir {file} is a file, not a folder; " + folder_fix("--data-dir", "data.dir")),
    (["data.mean", "--data-dir", "{file}"],
     "--data-dir {file} is a file, not a folder; " + folder_fix("--data-dir", "data.dir")),
    (["data.convert", "{file}", "{file}", "{file}"], "--out {file} is a file, not a folder; " + folder_fix("--out")),
    (["model.generate", "--model", "lenet", "--out", "{file}"],
     "--out {file} is a file, not a folder; " + folder_fix("--out")),
    (["memory.estimate", "--model", "lenet", "--plot", "{file}/x.png"],
     "--plot {file}/x.png: {file} is a file, not a folder; give --plot a file in a folder you can write to"),
    (["demo.classify", "{file}", "--annotate", "{file}"],
     "--annotate {file} is a file, not a folder; " + folder_fix("--annotate")),
    (["docker.train", "--data-dir", "{file}"],
     "--data-dir {file} is a file, not a folder; " + folder_fix("--data-dir", "data.dir")),
    (["docker.demo", "--runs-dir", "{file}"],
     "--runs-dir {file} is a file, not a folder; " + folder_fix("--runs-dir", "runs.dir")),
    (["train", "--data-dir", "{file}"],
     "--data-dir {file} is a file, not a folder; " + folder_fix("--data-dir", "data.dir")),
    (["train", "--runs-dir", "{file}"],
     "--runs-dir {file} is a file, not a folder; " + folder_fix("--runs-dir", "runs.dir")),
]


def _fill(text: str, place: dict[str, str]) -> str:
    return text.format(**place)


# The cases whose task finds the engine before it reads the option at fault.
NEED_ENGINE = {
    "demo.serve --deploy {file} --weights {file} --labels {file} --scale abc",
    "demo.serve --deploy {file} --weights {file} --labels {file} --scale 0",
    "memory.estimate --model lenet --input-shape 0,28,28", "memory.estimate --model lenet --input-shape 1,a,28",
    "memory.estimate --model lenet --type momentum", "memory.estimate --net {bin}", "memory.estimate --net {empty}",
    "data.mean --split validation", "data.mean --data-dir {file}", "demo.classify {dir}", "demo.classify ,",
    "demo.classify {file} --deploy {none} --weights {file} --labels {file}",
    "demo.classify {file} --deploy {bin} --weights {bin} --labels {bin}",
}


@pytest.mark.parametrize("args,message", [
    pytest.param(args, message, id=" ".join(args), marks=pytest.mark.engine if " ".join(args) in NEED_ENGINE else ())
    for args, message in CASES])
def test_a_bad_option_is_one_error_line(args, message, place, user_env, tmp_path):
    done = invoke(*(_fill(a, place) for a in args), env=user_env)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert (done.returncode, done.stderr.strip()) == (1, f"Error: {_fill(message, place)}")
    assert not (tmp_path / "data").exists() and not (tmp_path / "runs").exists()  # nothing started


def test_a_configured_folder_that_is_a_file_names_the_setting(place, tmp_path):
    done = invoke("quickstart", env={"INVOKE_DATA_DIR": place["file"], "INVOKE_RUNS_DIR": str(tmp_path / "runs")})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"Error: INVOKE_DATA_DIR {place['file']} is a file, not a folder; set "
                                   "INVOKE_DATA_DIR (or unset it and set data.dir in invoke.yaml) to a folder you "
                                   "can write to")


def test_a_bad_invoke_variable_is_named(user_env):
    done = invoke("engine.info", env={**user_env, "INVOKE_ENGINE_JOBS": "many"})
    assert (done.returncode, done.stderr.strip()) == (1, "Error: INVOKE_ENGINE_JOBS: engine.jobs: 'many' is not a number")


@pytest.mark.engine
def test_output_cut_short_by_its_reader_stops_quietly():
    """``caffetool memory.estimate ... | head -1``: the reader leaves after a line, the task stops, no traceback."""
    child = subprocess.Popen([str(INVOKE), "memory.estimate", "--model", "googlenet", "--json"], cwd=PROJECT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": PROJECT_DIR})
    assert child.stdout.readline() == b"{\n"
    child.stdout.close()  # the JSON is past a pipe's 64 KiB buffer, so the task is still writing
    assert (child.wait(timeout=120), child.stderr.read()) == (141, b"")
    child.stderr.close()


@pytest.fixture
def read_only(tmp_path: Path):
    """A folder on a read-only tmpfs (root writes anywhere else, whatever the permission bits say)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("args,flag,setting", [
    (["data.fetch", "--data-dir"], "--data-dir", "data.dir"),
    (["train", "--runs-dir"], "--runs-dir", "runs.dir"),
    (["model.generate", "--model", "lenet", "--out"], "--out", ""),
])
def test_a_read_only_folder_is_refused_before_work_starts(args, flag, setting, read_only, user_env):
    target = read_only / "sub"
    done = invoke(*args, str(target), env=user_env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"Error: {flag} {target}: {read_only} is on a read-only file system; "
                                   f"{folder_fix(flag, setting)}")


BAD_CONFIG = [
    ("data:\n\tdir: x\n", "invoke.yaml: line 2, column 1: found character '\\t' that cannot start any token "
                          "(YAML indents with spaces, not tabs); fix {folder}/invoke.yaml"),
    ("data: {dir: 5}\n", "invoke.yaml: data.dir: must be text (a folder), got 5"),
    ("runs: [1]\n", "invoke.yaml: runs: must be a mapping of settings (dir), got [1]"),
    ("data: 5\n", "invoke.yaml: data: must be a mapping of settings (dir, dataset), got 5"),
    ("- data\n- runs\n", "invoke.yaml: must be a mapping of settings (data: {{dir: ...}}), got list ['data', 'runs']"),
    ("engine: {jobs: lots}\n", "invoke.yaml: engine.jobs: 'lots' is not a number"),
    ("engine: {jobs: 0}\n", "invoke.yaml: engine.jobs: must be a number of compile jobs from 1 to 4096, got 0"),
    ("data: {dri: elsewhere}\n", "invoke.yaml: data.dri: unknown setting; data takes dir, dataset"),
    ("data: {dataset: cifar}\n", "invoke.yaml: unknown data.dataset 'cifar'; choose one of: mnist, fashion-mnist"),
    ("model: {dir: {a: 1}}\n", "invoke.yaml: model.dir: must be text (a folder), got {{'a': 1}}"),
    ("data: {dir: [unclosed\n", "invoke.yaml: line 2, column 1: expected ',' or ']', but got '<stream end>'; "
                                "fix {folder}/invoke.yaml"),
]


@pytest.mark.parametrize("text,message", BAD_CONFIG, ids=[t.strip() for t, _ in BAD_CONFIG])
def test_a_broken_invoke_yaml_is_named_not_a_traceback(text, message, tmp_path):
    shutil.copy(PROJECT / "tasks.py", tmp_path / "tasks.py")
    (tmp_path / "invoke.yaml").write_text(text)
    done = invoke("engine.info", cwd=tmp_path)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert (done.returncode, done.stderr.strip()) == (1, "Error: " + message.format(folder=tmp_path))


def test_a_users_invoke_yaml_of_the_wrong_kind_is_named(tmp_path):
    """Invoke parses ~/.invoke.yaml itself, and merges it into caffetool's defaults only later."""
    (tmp_path / ".invoke.yaml").write_text("runs: elsewhere\n")
    done = invoke("engine.info", env={"HOME": str(tmp_path)})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"Error: {tmp_path / '.invoke.yaml'}: runs: must be a mapping of settings (dir), "
                                   "got 'elsewhere'")


def test_a_binary_invoke_yaml_is_named(tmp_path):
    shutil.copy(PROJECT / "tasks.py", tmp_path / "tasks.py")
    (tmp_path / "invoke.yaml").write_bytes(b"\xff\xfe\x00data")
    done = invoke("--list", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"Error: cannot read {tmp_path / 'invoke.yaml'}: ")


def test_a_good_invoke_yaml_still_sets_the_folders(tmp_path):
    shutil.copy(PROJECT / "tasks.py", tmp_path / "tasks.py")
    (tmp_path / "invoke.yaml").write_text("data:\n  dir: elsewhere\n")
    done = invoke("data.info", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().startswith(f"Error: data set fashion-mnist not found in {tmp_path / 'elsewhere'}")
