"""A user's own Caffe project — an existing ``solver.prototxt`` and the nets it names — made ready to
train in a run directory without writing into the user's folder.

Relative paths inside the solver and its nets resolve the way ``caffe train`` resolves them: against
the directory the user runs from (BVLC's ``examples/mnist/lenet_solver.prototxt`` names
``examples/mnist/lenet_train_test.prototxt`` from the Caffe root). The copies written into the run
directory have every net inlined as its own file, data paths absolute and ``snapshot_prefix``
pointing into the run's ``snapshots/``. Old formats (V0/V1 ``layers``, ``solver_type``) are upgraded
with the engine's own ``upgrade_*_proto_text`` tools. Every file the run will read is listed with its
sha256 for the manifest.

Limits: only data layers that name files (Data, ImageData, HDF5Data, WindowData and their
``mean_file``) are rewritten; a Python layer's ``param_str`` is left as it is.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from google.protobuf.message import Message

from caffetool import fsio
from caffetool.checksum import sha256_file
from caffetool.data import datum, db
from caffetool.engine import EngineInfo
from caffetool.engine.locate import caffe_env
from caffetool.errors import DataError, NetError
from caffetool.nets import prototxt, state
from caffetool.nets.solvers import SolverOptions, check_test_iter, write_cuda_graphs
from caffetool.proc import run_checked
from caffetool.runs.folder import RunFolder

NET_FIELDS = ("net", "train_net")
NET_PARAM_FIELDS = ("net_param", "train_net_param")


@dataclass
class Project:
    """The solver as written, the solver and nets to run, the files it reads and what was upgraded."""

    source: Path
    original: Message
    solver: Message
    train_net: Message
    test_nets: list[Message] = field(default_factory=list)
    reads: list[Path] = field(default_factory=list)  # every file the run reads, absolute (see checksums)
    notices: list[str] = field(default_factory=list)


def load(path: str | Path, engine: EngineInfo, caffe_pb2: ModuleType, cwd: Path | None = None) -> Project:
    """The project whose solver is ``path``, every relative path resolved against ``cwd``."""
    here = (cwd or Path.cwd()).resolve()
    solver_path = _existing(here / path, "solver", NetError)
    notices: list[str] = []
    original = prototxt.read(solver_path, caffe_pb2.SolverParameter(), "--solver")
    solver = caffe_pb2.SolverParameter()
    solver.CopyFrom(original)
    if original.HasField("solver_type"):
        solver = _upgraded(engine, "upgrade_solver_proto_text", solver_path, caffe_pb2.SolverParameter())
        notices.append(f"{path}: old solver format upgraded with the engine's upgrade_solver_proto_text")
    reads = [solver_path]
    train = _train_net(solver, here, engine, caffe_pb2, reads, notices)
    tests = _test_nets(solver, here, engine, caffe_pb2, reads, notices)
    for net in [train, *tests]:
        _absolute_data(net, here, reads)
    return Project(solver_path, original, solver, train, tests, list(dict.fromkeys(reads)), notices)


def checksums(paths: list[Path]) -> dict[str, str]:
    """The sha256 of each file in ``paths`` (an LMDB's ``data.mdb``, a LevelDB's files, or a list file
    for a database folder), keyed by absolute path. Reading a large LMDB whole takes a while, so
    only training asks for it, not the memory estimate."""
    out: dict[str, str] = {}
    for path in paths:
        if path.is_dir():
            mdb = path / "data.mdb"
            members = [mdb] if mdb.is_file() else sorted(p for p in path.iterdir() if p.is_file() and p.name != "LOCK")
        else:
            members = [path]
        for member in members:
            out[str(member.resolve())] = sha256_file(member)
    return out


def write(project: Project, run_dir: Path, caffe_pb2: ModuleType) -> Path:
    """Write the solver and its nets into ``run_dir``; the solver's path is returned.

    The nets become ``train_net.prototxt`` and ``test_net_N.prototxt``, named by absolute path so
    ``caffe train`` finds them from any working directory.
    """
    run_dir = run_dir.resolve()
    solver = caffe_pb2.SolverParameter()
    solver.CopyFrom(project.solver)
    for name in (*NET_FIELDS, *NET_PARAM_FIELDS, "test_net", "test_net_param"):
        solver.ClearField(name)
    folder = RunFolder(run_dir)
    train_path = folder.train_net
    fsio.write_atomic(train_path, prototxt.to_text(project.train_net))
    solver.train_net = str(train_path)
    for i, net in enumerate(project.test_nets):
        test_path = folder.test_net(i)
        fsio.write_atomic(test_path, prototxt.to_text(net))
        solver.test_net.append(str(test_path))
    folder.snapshots.mkdir(exist_ok=True)
    solver.snapshot_prefix = str(folder.snapshots / Path(project.solver.snapshot_prefix or "snapshot").name)
    path = folder.solver
    fsio.write_atomic(path, prototxt.to_text(solver))
    return path


def _train_net(solver: Message, here: Path, engine: EngineInfo, caffe_pb2: ModuleType,
               reads: list[Path], notices: list[str]) -> Message:
    """The one net the solver trains: ``net``/``train_net`` read from a file, or given inline."""
    given = [name for name in (*NET_FIELDS, *NET_PARAM_FIELDS) if solver.HasField(name)]
    if len(given) > 1:
        raise NetError(f"the solver sets {' and '.join(given)}; Caffe trains exactly one net and refuses a solver "
                       "with more than one of net, net_param, train_net, train_net_param: keep one")
    for name in NET_PARAM_FIELDS:
        if solver.HasField(name):
            return _current(getattr(solver, name), engine, caffe_pb2, name, notices)
    for name in NET_FIELDS:
        if solver.HasField(name):
            return _net_file(getattr(solver, name), here, engine, caffe_pb2, reads, notices)
    raise NetError("the solver names no net: set `net` (or `train_net`) to the train/test prototxt")


def _test_nets(solver: Message, here: Path, engine: EngineInfo, caffe_pb2: ModuleType,
               reads: list[Path], notices: list[str]) -> list[Message]:
    """The nets tested: given as ``test_net``/``test_net_param``, or the train net in its TEST phase."""
    named = [_net_file(p, here, engine, caffe_pb2, reads, notices) for p in solver.test_net]
    inline = [_current(n, engine, caffe_pb2, "test_net_param", notices) for n in solver.test_net_param]
    if named or inline:
        return named + inline
    if not solver.test_iter:
        return []
    if solver.HasField("net"):
        return [_net_file(solver.net, here, engine, caffe_pb2, reads, notices) for _ in solver.test_iter]
    if solver.HasField("net_param"):
        return [_current(solver.net_param, engine, caffe_pb2, "net_param", notices) for _ in solver.test_iter]
    return []


def _net_file(name: str, here: Path, engine: EngineInfo, caffe_pb2: ModuleType,
              reads: list[Path], notices: list[str]) -> Message:
    """The net in the file ``name`` (relative to ``here``), upgraded if it is in an old format."""
    path = _existing(here / name, "net", NetError)
    reads.append(path)
    net, upgraded = read_net(engine, path, caffe_pb2)
    notice = f"{name}: old net format upgraded with the engine's upgrade_net_proto_text"
    if upgraded and notice not in notices:
        notices.append(notice)
    return net


def read_net(engine: EngineInfo, path: Path, caffe_pb2: ModuleType) -> tuple[Message, bool]:
    """The net in the file ``path`` in today's format, and whether it was in an old one (V0/V1
    ``layers``), which the engine's ``upgrade_net_proto_text`` upgrades as Caffe itself does."""
    net = prototxt.read(path, caffe_pb2.NetParameter())
    if not net.layers:
        return net, False
    return _upgraded(engine, "upgrade_net_proto_text", path, caffe_pb2.NetParameter()), True


def _current(net: Message, engine: EngineInfo, caffe_pb2: ModuleType, where: str, notices: list[str]) -> Message:
    """An inline net, upgraded through a temporary file when it is in an old format."""
    if not net.layers:
        copy = caffe_pb2.NetParameter()
        copy.CopyFrom(net)
        return copy
    with tempfile.TemporaryDirectory(prefix="caffetool-upgrade-") as tmp:
        path = Path(tmp) / "net.prototxt"
        path.write_text(prototxt.to_text(net))
        notices.append(f"{where}: old net format upgraded with the engine's upgrade_net_proto_text")
        return _upgraded(engine, "upgrade_net_proto_text", path, caffe_pb2.NetParameter())


def _upgraded(engine: EngineInfo, tool: str, path: Path, message: Message) -> Message:
    """``path`` upgraded by the engine's ``tool`` into a temporary file and parsed into ``message``."""
    with tempfile.TemporaryDirectory(prefix="caffetool-upgrade-") as tmp:
        out = Path(tmp) / path.name
        run_checked([engine.prefix / "bin" / tool, path, out], what=tool, error=NetError, env=caffe_env(),
                    timeout=60)
        return prototxt.read(out, message)


def _absolute_data(net: Message, here: Path, reads: list[Path]) -> None:
    """Make every data ``source`` and ``mean_file`` in ``net`` absolute; list what they name in ``reads``."""
    for layer in net.layer:
        for param in ("data_param", "image_data_param", "hdf5_data_param", "window_data_param"):
            if layer.HasField(param) and getattr(layer, param).source:
                block = getattr(layer, param)
                block.source = str(_existing(here / block.source, f"{layer.name}'s source", DataError))
                reads.append(Path(block.source))
        if layer.HasField("transform_param") and layer.transform_param.mean_file:
            mean = _existing(here / layer.transform_param.mean_file, f"{layer.name}'s mean_file", DataError)
            layer.transform_param.mean_file = str(mean)
            reads.append(mean)


def _existing(path: Path, what: str, error: type[Exception]) -> Path:
    """``path`` made absolute; a path that is not there raises ``error`` naming it."""
    if not path.exists():
        raise error(f"{what} not found: {path}")
    return path.resolve()


def override(project: Project, options: SolverOptions, gpu: bool, caffe_pb2: ModuleType,
             type_given: bool = False) -> str | None:
    """Apply the flags the user gave over the solver file; a notice when the file asks for a GPU
    that this run will not use.

    A field of ``options`` left at None keeps the file's value; ``type`` replaces the file's only
    when ``--type`` was given (``type_given``); ``cuda_graphs`` False turns the graphs off, and left
    on keeps what the file says.
    """
    solver = project.solver
    for key, value in vars(options).items():
        if key in ("type", "mode", "stepvalue", "iter_size", "cuda_graphs") or value is None:
            continue
        if key == "test_iter":
            count = max(1, len(solver.test_iter))
            del solver.test_iter[:]
            solver.test_iter.extend([value] * count)
        else:
            setattr(solver, key, value)
    if options.stepvalue:
        del solver.stepvalue[:]
        solver.stepvalue.extend(options.stepvalue)
    if options.iter_size != 1:
        solver.iter_size = options.iter_size
    if type_given:
        solver.type = options.type
    write_cuda_graphs(solver, options)
    wanted_gpu = solver.solver_mode == caffe_pb2.SolverParameter.GPU
    solver.solver_mode = caffe_pb2.SolverParameter.GPU if gpu else caffe_pb2.SolverParameter.CPU
    return f"{project.source.name} asks for solver_mode: GPU; training on the CPU" if wanted_gpu and not gpu else None


def has_python_layers(project: Project) -> bool:
    return any(layer.type == "Python" for net in (project.train_net, *project.test_nets) for layer in net.layer)


def check_deploy(path: Path, caffe_pb2: ModuleType) -> None:
    """A ``--deploy`` file must be a net with layers (not the solver, not an empty net)."""
    net = prototxt.read(path, caffe_pb2.NetParameter(), "--deploy")
    if not net.layer and not net.layers:
        raise NetError(f"--deploy {path} holds no layers; give the deploy net (the net with an Input layer)")


def check(project: Project, caffe_pb2: ModuleType) -> None:
    """Refuse, naming the solver file and its field, what Caffe would run without training anything
    (``max_iter`` below 1) or while it sits at a test (a ``test_iter`` that reads a test net's
    database many times over, :func:`caffetool.nets.solvers.check_test_iter`); call it after the
    flags are applied (:func:`override`, :func:`set_batches`)."""
    s, where = project.solver, project.source
    if s.max_iter < 1:
        raise NetError(f"{where}: max_iter {s.max_iter} trains nothing; set max_iter (or --max-iter) to the "
                       "iterations to train, 1 or more")
    for i, (net, batches) in enumerate(zip(project.test_nets, s.test_iter)):
        for layer in net.layer:
            if layer.type == "Data" and layer.data_param.source and state.included(layer, caffe_pb2.TEST):
                records = db.check(Path(layer.data_param.source))
                if records is not None:
                    check_test_iter(batches, layer.data_param.batch_size, records,
                                    f"{where}: test_iter {batches} (test net #{i})", NetError)


def set_batches(project: Project, batch: int | None, test_batch: int | None, caffe_pb2: ModuleType) -> None:
    """``--batch-size`` and ``--test-batch-size`` over the files: the ``batch_size`` of every data layer
    that runs in the TRAIN phase of the train net, and in the TEST phase of the test nets."""
    for nets, phase, size in (([project.train_net], caffe_pb2.TRAIN, batch),
                              (project.test_nets, caffe_pb2.TEST, test_batch)):
        for net in nets if size else []:
            for layer in net.layer:
                for param in BATCHED:
                    if layer.HasField(param) and state.included(layer, phase):
                        getattr(layer, param).batch_size = size


BATCHED = ("data_param", "image_data_param", "hdf5_data_param", "window_data_param", "memory_data_param")
DATA_LAYERS = ("Data", "ImageData", "HDF5Data", "WindowData", "MemoryData", "Input")
DROPPED_LAYERS = ("Accuracy", "Silence")


def deploy(train: Message, caffe_pb2: ModuleType) -> Message | None:
    """The deploy net of a classifier's ``train``, or None when it is no classifier or its input shape
    cannot be read: the first data layer becomes an ``Input`` of one record's shape (cropped when the
    net crops), loss and accuracy layers go, and a ``Softmax`` named ``prob`` follows the score that fed
    the ``SoftmaxWithLoss``."""
    losses = [layer for layer in train.layer if layer.type == "SoftmaxWithLoss"]
    data = next((layer for layer in train.layer if layer.type == "Data" and state.included(layer, state.TEST)), None)
    if not losses or data is None:
        return None
    shape = _record_shape(Path(data.data_param.source), data.transform_param.crop_size, caffe_pb2)
    if shape is None:
        return None
    net = caffe_pb2.NetParameter(name=train.name)
    net.layer.add(name=data.name, type="Input", top=[data.top[0]]).input_param.shape.add(dim=[1, *shape])
    dropped = set(data.top[1:])
    for layer in train.layer:
        if (layer.type in DATA_LAYERS or layer.type in DROPPED_LAYERS or layer.type.endswith("Loss")
                or not state.included(layer, state.TEST) or dropped & set(layer.bottom)):
            dropped |= set(layer.top) if layer.type not in DATA_LAYERS else set()
            continue
        kept = net.layer.add()
        kept.CopyFrom(layer)
        del kept.include[:]
        del kept.exclude[:]
    net.layer.add(name="prob", type="Softmax", bottom=[losses[0].bottom[0]], top=["prob"])
    return net


def data_shape(net: Message, caffe_pb2: ModuleType) -> tuple[int, int, int] | None:
    """(channels, height, width) of the records the first Data layer of ``net`` reads, before any
    crop (None when it reads encoded images or no Data layer has records)."""
    data = next((layer for layer in net.layer if layer.type == "Data" and layer.data_param.source), None)
    shape = _record_shape(Path(data.data_param.source), 0, caffe_pb2) if data is not None else None
    return tuple(shape) if shape else None


def with_test_state(net: Message, solver: Message, index: int, caffe_pb2: ModuleType) -> Message:
    """A copy of ``net`` with the state Caffe's ``Solver::InitTestNets`` gives test net ``index``: the
    TEST phase, merged with the net's own ``state`` and the solver's ``test_state`` for that net."""
    merged = caffe_pb2.NetState(phase=caffe_pb2.TEST)
    merged.MergeFrom(net.state)
    if len(solver.test_state) > index:
        merged.MergeFrom(solver.test_state[index])
    tested = caffe_pb2.NetParameter()
    tested.CopyFrom(net)
    tested.state.CopyFrom(merged)
    return tested


def _record_shape(source: Path, crop: int, caffe_pb2: ModuleType) -> list[int] | None:
    """(channels, height, width) of the first Datum in the database at ``source``, cropped to ``crop``."""
    first = next(db.read(source, limit=1), None)
    if first is None:
        return None
    message = datum.parse(first[1], caffe_pb2)
    if message.encoded:
        return None
    return [message.channels, crop or message.height, crop or message.width]
