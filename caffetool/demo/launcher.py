"""Starting the demo server: options checked and the model loaded (and checked) before the port opens.

With ``workers > 1`` uvicorn starts that many processes; each loads the model itself (nets are
not shared across processes), from the description passed in an environment variable, and ends
when the server's main process dies, even by SIGKILL (nothing then would stop it, and it would keep
the port).
Connections are held by :class:`.protocol.DeadlineProtocol`: idle ones are closed after
``KEEP_ALIVE_TIMEOUT`` seconds, requests not received within its ``request_timeout`` get 408.
The demo has no authentication: bound to anything but loopback, it says so.
"""

from __future__ import annotations

import dataclasses
import gc
import ipaddress
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

from caffetool import proc
from caffetool.backends import dispatch
from caffetool.backends.devices import CPU, PycaffeDevice
from caffetool.choices import PORT
from caffetool.demo.protocol import DeadlineProtocol
from caffetool.demo.webapp import create_app
from caffetool.engine import EngineInfo, cpu_threads, import_caffe, locate
from caffetool.errors import ConfigError
from caffetool.inference import modelfiles
from caffetool.serving import classifier, detector, repository, telemetry
from caffetool.serving.batcher import Batching
from caffetool.serving.catalog import ServedModel

CONFIG_VARIABLE = "CAFFETOOL_DEMO_CONFIG"
KEEP_ALIVE_TIMEOUT = 5  # seconds a connection may wait for its first request, or its next one


def serve(engine: EngineInfo, source: modelfiles.ModelFiles | Path, backend: str, host: str, port: int,
          max_body: int, workers: int = 1, device: PycaffeDevice = CPU, batching: Batching = Batching()) -> None:
    """Load and check the model (``source``: its files, or a model repository's folder), then serve it
    until Ctrl-C; the address is checked first."""
    dispatch.chosen(backend, device)  # a backend that cannot run on the device, refused before the port is probed
    check_address(host, port)
    cpu_threads.for_serving()  # before pycaffe loads; workers inherit it
    models = _models(engine, source, backend, device, say=lambda line: print(line, file=sys.stderr, flush=True))
    caffe_pb2 = import_caffe(engine).proto.caffe_pb2
    warning = network_warning(host)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    print(f"serving {_served(models, device)} on http://{host}:{port}/ — Ctrl-C stops", flush=True)
    if workers <= 1:
        uvicorn.run(frozen(create_app(models, max_body, caffe_pb2, batching)), **uvicorn_options(host, port))
        return
    os.environ[CONFIG_VARIABLE] = json.dumps({
        "prefix": str(engine.prefix), "parent": os.getpid(), "backend": backend, "max_body": max_body, "gpu": device.gpu,
        "device": device.label, "batching": dataclasses.asdict(batching),
        "repository": str(source) if isinstance(source, Path) else None,
        "files": None if isinstance(source, Path) else
        {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(source).items()},
    })
    with telemetry.shared_folder():  # the workers' series, added up at each scrape
        uvicorn.run("caffetool.demo.launcher:app_from_environment", factory=True, workers=workers,
                    **uvicorn_options(host, port))


def _models(engine: EngineInfo, source: modelfiles.ModelFiles | Path, backend: str, device: PycaffeDevice,
            validate: bool = True, say: Callable[[str], None] = lambda _: None
            ) -> classifier.Classifier | detector.Detector | list[ServedModel]:
    """The model (a classifier or a detector, as its net is), or the repository's models; a bad model
    fails start-up (a repository's only where none of its models loads: ``say`` names each one left out)."""
    if isinstance(source, Path):
        return repository.load(engine, source, backend, device, validate, say)
    return detector.load_model(engine, source, backend, validate=validate, device=device)


def _served(models: classifier.Classifier | detector.Detector | list[ServedModel], device: PycaffeDevice) -> str:
    """What the server serves, in a few words: ``lenet (caffe, CPU)``, or for a repository
    ``lenet versions 1, 2 (caffe), shirts version 1 (onnxruntime); CPU``."""
    if not isinstance(models, list):
        return f"{models.name} ({models.backend}, {device.label})"
    versions: dict[str, list[ServedModel]] = {}
    for m in models:
        versions.setdefault(m.name, []).append(m)
    listed = [f"{name} version{'s' if len(ms) > 1 else ''} {', '.join(m.version for m in ms)} "
              f"({ms[-1].model.backend})" for name, ms in versions.items()]
    return f"{', '.join(listed)}; {device.label}"


def check_port(port: int) -> None:
    """Refuse what is not a TCP port before the model loads: uvicorn would listen somewhere else."""
    if not PORT.admits(port):
        raise PORT.refusal("--port", port)


def check_address(host: str, port: int) -> None:
    """Refuse a host that does not resolve, or an address already taken, before the model loads:
    uvicorn reports either only after it, as a log line. The probe binds as uvicorn will, and lets go."""
    check_port(port)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(f"--host {host!r} is not an address of this machine: {getattr(e, 'strerror', e)}") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}; choose another --port "
                              "(or --host)") from None


def network_warning(host: str) -> str | None:
    """A warning when ``host`` is not loopback; a host name other than localhost counts as network."""
    if host == "localhost" or _is_loopback_address(host):
        return None
    return (f"Warning: --host {host} makes the demo reachable from the network, with no authentication; "
            "--host 127.0.0.1 keeps it on this machine")


def _is_loopback_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def uvicorn_options(host: str, port: int) -> dict[str, Any]:
    return {"host": host, "port": port, "log_level": "warning", "http": DeadlineProtocol,
            "timeout_keep_alive": KEEP_ALIVE_TIMEOUT}


def app_from_environment() -> Starlette:
    """uvicorn worker entry point: rebuild the app from CONFIG_VARIABLE (already validated)."""
    config = json.loads(os.environ[CONFIG_VARIABLE])
    proc.parent_death_signal(signal.SIGTERM)()  # uvicorn's own graceful stop
    if os.getppid() != config["parent"]:
        os.kill(os.getpid(), signal.SIGTERM)
    f = config["files"]
    source = Path(config["repository"]) if f is None else modelfiles.ModelFiles(
        **{k: (Path(v) if k in ("deploy", "weights", "labels", "mean", "run") and v else v) for k, v in f.items()})
    engine = locate(config["prefix"], probe=False)
    device = PycaffeDevice(config["gpu"], config["device"])
    models = _models(engine, source, config["backend"], device, validate=False)
    return frozen(create_app(models, config["max_body"], import_caffe(engine).proto.caffe_pb2,
                             Batching(**config["batching"])))


def frozen(app: Starlette) -> Starlette:
    """``app``, with every object made so far (modules, nets, the app) moved out of the garbage
    collector's sight (``gc.freeze``). A full collection walks every tracked object, and a server
    with LeNet loaded tracks about 74,000 at start: a collection took 16 ms, and the requests that
    waited for it were the slowest. LeNet at 2,000 requests/s: p99 42 ms before, 13 ms after
    (benchmarks/RESULTS.md, "The demo server")."""
    gc.collect()
    gc.freeze()
    return app
