"""Docker: the Dockerfile lints clean, and the tasks send Docker exactly the right commands.

Here the docker tasks run against Invoke's MockContext — a stand-in for `c.run` that records each
command and answers with canned results — so every variant (the GPU ones too, which need an NVIDIA
runtime these machines lack) is checked down to the exact argument list.
tests/test_docker_daemon.py builds and runs the CPU image with a real Docker daemon.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Config, MockContext, Result

from caffetool import dockerimg
from caffetool.engine import cudaarch, cudnnlibs
from caffetool.errors import ConfigError
from caffetool.tasks import docker
from caffetool.tasks.settings import TASK_DEFAULTS

from .conftest import PROJECT


@pytest.mark.parametrize("dockerfile", sorted(dockerimg.DOCKERFILES.values()))
def test_dockerfiles_lint_clean(dockerfile):
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    done = subprocess.run([hadolint, str(PROJECT / dockerfile)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", sorted(dockerimg.DOCKERFILES.values()))
def test_dockerfiles_need_no_buildkit(dockerfile):
    """Debian's and Ubuntu's docker.io have no buildx: no named contexts, no RUN --mount, no heredocs."""
    text = (PROJECT / dockerfile).read_text()
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", text, re.MULTILINE))
    assert stages
    assert set(re.findall(r"--from=(\S+)", text)) <= stages
    assert not re.search(r"^RUN --|<<", text, re.MULTILINE)
    for copied in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.MULTILINE):
        for path in copied.split():
            assert (path.startswith("build/docker-context/") or (PROJECT / path).exists()), path


def test_dockerignore_keeps_bulk_out_and_staged_inputs_in():
    lines = (PROJECT / ".dockerignore").read_text().split("\n")
    assert {"data/", "runs/", ".venv/", ".git/"} <= set(lines)
    assert lines.index("!build/docker-context/") > lines.index("build/*")


def test_runtime_lib_collector_is_valid_shell():
    assert subprocess.run(["bash", "-n", str(PROJECT / "docker" / "collect-runtime-libs.sh")]).returncode == 0


def context(runtimes: str = '{"nvidia":{},"runc":{}}', docker: bool = True, daemon: bool = True,
            buildx: bool = False, answers_for: dict[str, Result] | None = None) -> MockContext:
    answers = {
        "command -v docker": Result("/usr/bin/docker\n" if docker else "", exited=0 if docker else 1),
        "docker info --format '{{json .Runtimes}}'": Result(runtimes + "\n", exited=0 if daemon else 1),
        "docker buildx version": Result("github.com/docker/buildx v0.17.1\n" if buildx else "", exited=0 if buildx else 1),
    }
    c = MockContext(config=Config(overrides=TASK_DEFAULTS), run=answers, repeat=True)
    for pattern, result in (answers_for or {}).items():  # before the catch-all below: the first match answers
        c.set_result_for("run", re.compile(pattern), result)
    c.set_result_for("run", re.compile(r"docker image .*"), Result("null\n"))  # an image without labels
    c.set_result_for("run", re.compile(r"docker (build|run|push) .*"), Result(""))
    return c


def sent(c: MockContext) -> list[list[str]]:
    return [shlex.split(call.args[0]) for call in c.run.call_args_list if call.args[0].startswith("docker ")
            and not call.args[0].startswith(("docker info", "docker buildx", "docker image inspect"))]


def env_of(c: MockContext, verb: str) -> dict:
    (call,) = [call for call in c.run.call_args_list if call.args[0].startswith(f"docker {verb} ")]
    return call.kwargs["env"]


def test_gpu_build_command(tmp_path, engine, capsys):
    c = context(buildx=True)
    docker.build(c, variant="gpu", cuda="12.4.1", ubuntu="22.04")
    (argv,) = sent(c)
    assert argv == [
        "docker", "build", "--file", str(PROJECT / "docker" / "Dockerfile"),
        "--build-arg", "BUILD_IMAGE=nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04",
        "--build-arg", "RUNTIME_IMAGE=nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
        "--build-arg", "VARIANT=gpu", "--build-arg", "CUDA_ARCH=70 72 75 80 86 87 89 90",
        "--build-arg", "NCCL_VERSION=2.21.5-1+cuda12.4",
        "--label", 'org.caffetool.engine.device_code={"sm":["70","72","75","80","86","87","89","90"],"ptx":["90"]}',
        "--label", f"org.caffetool.engine.recipe={dockerimg.recipe_label()}",
        "--label", "org.caffetool.variant=gpu", "--label", "org.caffetool.base=nvidia",
        "--tag", "caffetool:gpu-cuda12.4.1-ubuntu22.04", str(PROJECT)]
    staged = PROJECT / dockerimg.STAGE / "source"
    assert sorted(p.name for p in staged.iterdir()) == sorted(t.name for t in dockerimg.CAFFE_SOURCE.tarballs)
    assert env_of(c, "build") == {}
    assert "with BuildKit (docker buildx)" in capsys.readouterr().out


@pytest.mark.slow  # bundles the installed engine (about 40 s on 2 cores)
def test_cpu_build_from_a_bundle_with_the_legacy_builder_network_tag_and_push(engine, capsys):
    from caffetool.engine import bundles

    c = context(runtimes='{"runc":{}}')  # a CPU image needs no nvidia runtime
    docker.build(c, variant="cpu", tag="me/caffetool:cpu", push=True, network="host")
    build, push = sent(c)
    assert build[:5] == ["docker", "build", "--file", str(PROJECT / "docker" / "bundle.Dockerfile"),
                         "--build-arg"]
    assert build[5:8] == ["BASE_IMAGE=debian:12", "--network", "host"]
    assert build[-6:] == ["org.caffetool.variant=cpu", "--label", "org.caffetool.base=debian", "--tag",
                          "me/caffetool:cpu", str(PROJECT)]
    assert "--push" not in build and "--build-context" not in " ".join(build)
    assert push == ["docker", "push", "me/caffetool:cpu"]
    assert env_of(c, "build") == {"DOCKER_BUILDKIT": "0"}
    staged = PROJECT / dockerimg.STAGE / "engine" / dockerimg.BUNDLE_NAME
    assert bundles.read_manifest(staged)["engine"]["version"]
    assert "with the legacy builder" in capsys.readouterr().out


def test_local_certificate_authorities_are_staged_and_stale_ones_dropped(tmp_path):
    local = tmp_path / "local"
    (local / "corp").mkdir(parents=True)
    (local / "corp" / "proxy.crt").write_text("PEM")
    (local / "notes.txt").write_text("not a certificate")
    folder = tmp_path / dockerimg.STAGE / "ca-certificates"
    folder.mkdir(parents=True)
    (folder / "old.crt").write_text("gone")
    assert dockerimg.stage_certificates(tmp_path, local) == ["corp-proxy.crt"]
    assert [p.name for p in folder.iterdir()] == ["corp-proxy.crt"]
    assert dockerimg.stage_certificates(tmp_path, tmp_path / "none") == [] and not any(folder.iterdir())


def test_train_runs_as_the_user_with_gpus_and_mounts(tmp_path):
    c = context()
    docker.train(c, args="--gpu all --max-iter 500", data_dir=str(tmp_path / "d"), runs_dir=str(tmp_path / "r"))
    (argv,) = sent(c)
    assert argv == ["docker", "run", "--rm", "--init", "--user", f"{os.getuid()}:{os.getgid()}", "--env", "HOME=/tmp",
                    "--volume", f"{tmp_path / 'd'}:/opt/caffetool/data", "--volume", f"{tmp_path / 'r'}:/opt/caffetool/runs",
                    "--gpus", "all", "--shm-size", "1g", "caffetool:gpu-cuda12.4.1-ubuntu22.04",
                    "train", "--gpu", "all", "--max-iter", "500"]


def labelled(code: str) -> Result:
    return Result(json.dumps({dockerimg.DEVICE_CODE_LABEL: code, "org.caffetool.variant": "gpu"}) + "\n")


def test_train_refuses_a_card_the_image_has_no_kernels_for(tmp_path, monkeypatch):
    """The image's device-code label against the cards NVML names (a stand-in answer: no GPU here),
    before any container starts."""
    monkeypatch.setattr(cudaarch, "nvml_cards", lambda: [("Tesla P100-PCIE-16GB", (6, 0))])
    c = context(answers_for={r"docker image inspect .*": labelled('{"sm":["70","75","90"],"ptx":["90"]}')})
    with pytest.raises(Exception, match=re.escape(
            "Error: GPU 0 (Tesla P100-PCIE-16GB, compute capability 6.0) cannot run the image "
            "caffetool:gpu-cuda12.4.1-ubuntu22.04: it carries code for sm_70, sm_75, sm_90, PTX 9.0; rebuild it with "
            "`caffetool docker.build --variant gpu --cuda 12.8.1` (or --base pypi from an engine built for it)")):
        docker.train.body(c, data_dir=str(tmp_path / "d"), runs_dir=str(tmp_path / "r"))
    assert sent(c) == [] and not (tmp_path / "d").exists()


def test_train_notes_a_card_that_runs_only_through_ptx(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cudaarch, "nvml_cards", lambda: [("NVIDIA GeForce RTX 5090", (12, 0))])
    c = context(answers_for={r"docker image inspect .*": labelled('{"sm":["70","90"],"ptx":["90"]}')})
    docker.train(c, data_dir=str(tmp_path / "d"), runs_dir=str(tmp_path / "r"))
    assert len(sent(c)) == 1
    assert "note: GPU 0 (NVIDIA GeForce RTX 5090, compute capability 12.0) runs the image" in capsys.readouterr().out


def test_demo_publishes_on_loopback_only(tmp_path):
    c = context(runtimes='{"runc":{}}')
    docker.demo(c, variant="cpu", run="full-default", port=8080, data_dir=str(tmp_path), runs_dir=str(tmp_path))
    (argv,) = sent(c)
    assert argv[argv.index("--publish") + 1] == "127.0.0.1:8080:8000"
    assert "--gpus" not in argv
    assert argv[-8:] == ["caffetool:cpu-debian12", "demo.serve", "--host", "0.0.0.0", "--port", "8000",
                         "--run", "full-default"]


def test_demo_on_the_host_network_listens_on_loopback_itself(tmp_path):
    c = context(runtimes='{"runc":{}}')
    docker.demo(c, variant="cpu", port="8080", network="host", data_dir=str(tmp_path), runs_dir=str(tmp_path))
    (argv,) = sent(c)
    assert "--publish" not in argv and argv[argv.index("--network") + 1] == "host"
    assert argv[-6:] == ["caffetool:cpu-debian12", "demo.serve", "--host", "127.0.0.1", "--port", "8080"]


@pytest.mark.parametrize("ctx,message", [
    (dict(docker=False), "docker is not installed"),
    (dict(daemon=False), "the Docker daemon is not reachable"),
    (dict(runtimes='{"runc":{}}'), "Docker has no nvidia runtime: install the NVIDIA Container Toolkit"),
])
def test_missing_docker_pieces_are_explained_before_anything_runs(tmp_path, ctx, message):
    c = context(**ctx)
    with pytest.raises(Exception, match=message):
        docker.train.body(c, data_dir=str(tmp_path), runs_dir=str(tmp_path))
    assert sent(c) == []


def test_unknown_variant_or_cuda_is_refused():
    with pytest.raises(ConfigError, match="unknown --variant 'tpu'"):
        dockerimg.image("tpu")
    with pytest.raises(ConfigError, match=r"^unknown --cuda '11.8'; choose one of: 12.4.1, 12.6.3, 12.8.1 "
                                          r"\(NCCL is pinned per CUDA release\)$"):
        dockerimg.image("gpu", cuda="11.8")
    assert dockerimg.image("CPU").variant == "cpu"


def test_gpu_image_from_pypi_builds_from_a_bundle_on_debian():
    img = dockerimg.image("gpu", base="pypi")
    assert (img.tag, img.bundled, img.gpu) == ("caffetool:gpu-pypi-debian12", True, True)
    argv = dockerimg.build_argv(img, PROJECT, network="host")
    assert argv[:4] == ["docker", "build", "--file", str(PROJECT / "docker" / "bundle.Dockerfile")]
    assert argv[4:10] == ["--build-arg", "BASE_IMAGE=debian:12", "--build-arg", "NVIDIA_VISIBLE_DEVICES=all",
                          "--network", "host"]
    assert argv[-6:] == ["org.caffetool.variant=gpu", "--label", "org.caffetool.base=pypi",
                         "--tag", "caffetool:gpu-pypi-debian12", str(PROJECT)]
    assert "ARG NVIDIA_VISIBLE_DEVICES=void" in (PROJECT / img.dockerfile).read_text()
    with pytest.raises(ConfigError, match="unknown --base 'conda'"):
        dockerimg.image("gpu", base="conda")


def test_gpu_image_from_pypi_refuses_a_cpu_engine_before_bundling(engine, capsys):
    c = context(runtimes='{"runc":{}}')
    with pytest.raises(Exception, match=r"is CPU-only, and the gpu image from PyPI needs a CUDA one: build it "
                                        r"with `caffetool engine.compile-check`"):
        docker.build.body(c, variant="gpu", base="pypi", prefix=str(engine.prefix))
    assert sent(c) == [] and "staged" not in capsys.readouterr().out


LDD_GPU = """/opt/caffe/bin/caffe:
\tlinux-vdso.so.1 (0x00007ffd)
\tlibcaffe.so.1.0.0 => /opt/caffe/bin/../lib/libcaffe.so.1.0.0 (0x00007f01)
\tlibcudart.so.13 => /opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13 (0x00007f02)
\tlibcuda.so.1 => not found
/opt/caffe/lib/libcaffe.so:
\tlibglog.so.1 => /opt/caffe/lib/vendor/libglog.so.1 (0x00007f03)
\tlibnvidia-ml.so.1 => not found
"""


def test_ldd_misses_only_count_when_the_driver_does_not_provide_them():
    assert dockerimg.unresolved(LDD_GPU) == []
    assert dockerimg.unresolved(LDD_GPU + "\tlibcudnn.so.9 => not found\n\tlibcudnn.so.9 => not found\n") == \
        ["libcudnn.so.9"]


def _checked(ldd: Result, version: Result) -> MockContext:
    return context(runtimes='{"runc":{}}', answers_for={r"docker run .* --entrypoint ldd .*": ldd,
                                                        r"docker run .* --entrypoint /opt/caffe/bin/caffe .*": version})


def test_check_resolves_the_engine_inside_the_image_without_a_gpu(capsys):
    c = _checked(Result(LDD_GPU), Result("caffe version 1.0.0\n"))
    docker.check(c, variant="gpu", base="pypi")
    ldd, version = sent(c)
    assert ldd == ["docker", "run", "--rm", "--network", "none", "--entrypoint", "ldd", "caffetool:gpu-pypi-debian12",
                   "/opt/caffe/bin/caffe", "/opt/caffe/lib/libcaffe.so"]
    assert version[-2:] == ["caffetool:gpu-pypi-debian12", "--version"]
    out = capsys.readouterr().out
    assert "resolve all 5 libraries" in out and "caffe --version: caffe version 1.0.0" in out


LDD_CUDNN = LDD_GPU + "\tlibcudnn.so.9 => /opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9 (0x7f04)\n"


def cudnn_listing(*names: str, broken: str = "") -> Result:
    """What ldd prints inside the image for each cuDNN file (one needing ``broken``, where named)."""
    return Result("".join(f"== {name}\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\tlibcuda.so.1 => not found\n"
                          + (f"\t{broken} => not found\n" if broken and name == "libcudnn_graph.so.9" else "")
                          for name in names))


ALL_CUDNN = ("libcudnn.so.9", *cudnnlibs.SUBLIBRARIES[9])


def test_check_lists_every_cudnn_sub_library_inside_the_image(capsys):
    c = context(runtimes='{"runc":{}}', answers_for={r"docker run .* --entrypoint ldd .*": Result(LDD_CUDNN),
                                                     r"docker run .* --entrypoint sh .*": cudnn_listing(*ALL_CUDNN),
                                                     r"docker run .* --entrypoint /opt/caffe/bin/caffe .*":
                                                         Result("caffe version 1.0.0\n")})
    docker.check(c, variant="gpu", base="pypi")
    _, listing, _ = sent(c)
    assert listing[listing.index("--entrypoint") + 1] == "sh" and listing[-1].endswith("nvidia/cudnn/lib")
    assert ("cuDNN 8 libraries in /opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib, every sub-library present "
            "and resolving") in capsys.readouterr().out


@pytest.mark.parametrize("listing,message", [
    (cudnn_listing(*ALL_CUDNN[:-2]), "missing libcudnn_cnn.so.9, libcudnn_adv.so.9"),
    (cudnn_listing(*ALL_CUDNN, broken="libz.so.1"), "libcudnn_graph.so.9 cannot find libz.so.1"),
])
def test_check_refuses_an_image_whose_cudnn_would_fail_on_a_gpu(listing, message):
    c = context(runtimes='{"runc":{}}', answers_for={r"docker run .* --entrypoint ldd .*": Result(LDD_CUDNN),
                                                     r"docker run .* --entrypoint sh .*": listing})
    with pytest.raises(Exception, match=r"cuDNN 9 would fail at its first convolution on a GPU "
                                         r"\(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED\): in .*" + re.escape(message)):
        docker.check.body(c, variant="gpu", base="pypi")


@pytest.mark.parametrize("ldd,version,message", [
    (Result(LDD_GPU + "\tlibcublas.so.13 => not found\n"), Result("caffe version 1.0.0\n"),
     "inside caffetool:gpu-pypi-debian12 the engine cannot find libcublas.so.13; rebuild the image"),
    (Result(LDD_GPU), Result("", stderr="error while loading shared libraries", exited=127),
     "`caffe --version` failed inside caffetool:gpu-pypi-debian12: error while loading shared libraries"),
])
def test_check_names_what_is_broken(ldd, version, message):
    with pytest.raises(Exception, match=re.escape(message)):
        docker.check.body(_checked(ldd, version), variant="gpu", base="pypi")
