"""A sweep in TensorBoard's HParams dashboard: one session per trial, beside the trials' own scalars.

Why: ``tensorboard --logdir runs/<sweep>`` shows every trial's curves (each trial's run writes them,
:mod:`caffetool.train.runevents`); the HParams tab adds the view a sweep is for, a table and
parallel coordinates of every trial's parameters against its results. The plugin reads two kinds
of summaries, written here with TensorBoard's own protos and metadata
(:mod:`tensorboard.plugins.hparams`; its ``summary`` module would import TensorFlow):

* the experiment, in ``runs/<sweep>/`` (run ``.``): every swept parameter with its domain (a grid's
  values, a range's interval) and the metrics: the sweep's metric, ``train/loss``, and every other
  ``train/`` and ``test<k>/`` scalar tag the trials' event files hold (not the ``system/``
  readings: their last value is a sample taken at an arbitrary moment, not a result);
* one session per trial, in ``runs/<sweep>/trial-NNNNN/`` (run ``trial-NNNNN``): its parameter
  values and its end status. The plugin reads metric ``(group, tag)`` of session ``S`` from run
  ``S/group``; the metrics' group is ``tensorboard``, so each session finds its own run's scalars in
  ``trial-NNNNN/tensorboard/`` and shows their last values. The session stays out of that folder,
  which holds the run's own event files. A trial without a run (Caffe refused it before its first
  iteration, or it has not started) has its session in ``runs/<sweep>/no-run/trial-NNNNN/``: its
  parameters and status, no metrics; its own folder is left to the run it may still get. Every
  session's group is named after its trial, so the table's "Trial ID" is the trial either way.

How: each file is one event file (TensorBoard's records: length, masked CRCs, an ``Event``), built
in memory and written with :func:`caffetool.fsio.write_atomic` under one fixed name
(:data:`FILE`), so writing again (``sweep.report`` after a resume) replaces the files instead of
adding sessions, and a crash leaves the old file or the new one, never a part. What an earlier
write left that this one did not make (the no-run session of a trial that now has a run, the
temporary sibling of a killed write) is removed.

Status: ``finished`` and ``stopped early`` (the scheduler's verdict: the figures are real) are
TensorBoard's success, ``failed`` and ``diverged`` its failure, a run still training is running,
anything else (``interrupted``, waiting for ``sweep.resume``; ``pending``) unknown.

Limits: a TensorBoard already running reads each session once; restart it to see a rewritten
status (metric values it reads live). Ray Tune's own TensorBoard logger, which would add a
metric-less session per trial under ``tune/``, is turned off by the sweep
(:mod:`caffetool.sweep.cluster`); sweeps run before that show each trial twice.
"""

from __future__ import annotations

import contextlib
import io
import struct
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from caffetool import fsio
from caffetool.errors import ConfigError, RunError
from caffetool.runs import rundir
from caffetool.runs.folder import NAMES, RunFolder
from caffetool.sweep import searchspace, sweeprecord
from caffetool.train import runevents

FILE = "events.out.tfevents.caffetool-hparams"  # "tfevents" in the name is what TensorBoard looks for
GROUP = NAMES["tensorboard"]  # a metric of session S is read from run S/GROUP: the trial's own events
NO_RUN = "no-run"  # the sessions of trials without a run: runs/<sweep>/no-run/trial-NNNNN/
LOSS = "train/loss"
SKIPPED = ("system/",)
RECORD_HEAD = 12  # a record's length and the length's CRC
STATUS = {"finished": "STATUS_SUCCESS", "stopped early": "STATUS_SUCCESS", "failed": "STATUS_FAILURE",
          "diverged": "STATUS_FAILURE", "running": "STATUS_RUNNING", "setting-up": "STATUS_RUNNING"}


def write(sweep_dir: Path, plan: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The experiment in ``sweep_dir`` and one session per trial, replacing what an earlier write left.

    ``plan`` is the plan as ``sweep.json`` holds it, ``rows`` as
    :func:`caffetool.sweep.leaderboard.collect` returns them."""
    with_run = [r for r in rows if r.get("run_dir")]
    tags = metric_tags(plan["metric"], (RunFolder(Path(r["run_dir"])).tensorboard for r in with_run))
    _write_events(sweep_dir / FILE, [experiment(sweep_dir, plan, rows, tags)])
    written = {(sweep_dir / FILE).resolve()}
    for row in rows:
        if not row.get("run_dir") and not rundir.NAME.match(row["trial"]):
            continue  # not a name a folder can have; results.csv still lists it
        folder = Path(row["run_dir"]) if row.get("run_dir") else sweep_dir / NO_RUN / row["trial"]
        _write_events(folder / FILE, session(row))
        written.add((folder / FILE).resolve())
    _remove_others(sweep_dir, written)


def metric_tag(metric: str) -> str:
    """The scalar tag a run's event files give the sweep's ``--metric``: ``test/accuracy`` is ``test0/accuracy``."""
    m = searchspace.parse_metric(metric)
    return f"train/{m.output}" if m.net < 0 else f"test{m.net}/{m.output}"


def metric_tags(metric: str, folders: Iterable[Path]) -> list[str]:
    """The sweep's metric, ``train/loss``, then every other scalar tag in the event files of ``folders``."""
    found: set[str] = set()
    for folder in folders:
        for path in sorted(folder.glob(runevents.PATTERN)):
            found |= _scalar_tags(path)
    first = list(dict.fromkeys([metric_tag(metric), LOSS]))
    rest = sorted(t for t in found if t not in first and not t.startswith(SKIPPED))
    return first + rest


def experiment(sweep_dir: Path, plan: dict[str, Any], rows: list[dict[str, Any]], tags: list[str]) -> Any:
    """The experiment summary: the swept parameters with their domains, and the metrics ``tags``."""
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2  # noqa: PLC0415 - when writing

    try:
        params = [searchspace.parse_param(p) for p in plan["params"]]
    except ConfigError as e:
        raise RunError(f"{sweep_dir / sweeprecord.PLAN}: {e}") from None
    infos = [_hparam_info(p) for p in params]
    declared = {p.name for p in params}
    for name in dict.fromkeys(n for r in rows for n in r["params"] if n not in declared):
        infos.append(api_pb2.HParamInfo(name=name, type=_data_type(r["params"][name] for r in rows
                                                                    if r["params"].get(name) is not None)))
    goal = f"the sweep's metric ({plan['metric']}, {plan.get('mode', 'max')})"
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(group=GROUP, tag=tag), display_name=tag,
                                  description=goal if i == 0 else "",
                                  dataset_type=api_pb2.DATASET_TRAINING if tag.startswith("train/")
                                  else api_pb2.DATASET_VALIDATION)
               for i, tag in enumerate(tags)]
    described = api_pb2.Experiment(description=f"sweep {plan['name']}: one session per trial",
                                   time_created_secs=time.time(), hparam_infos=infos, metric_infos=metrics)
    return _summary(metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=described))


def session(row: dict[str, Any]) -> list[Any]:
    """A trial's session: its parameter values, then its end status."""
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2  # noqa: PLC0415

    # The group's name is what the table shows as the trial: the trial's name, wherever its session is.
    start = plugin_data_pb2.SessionStartInfo(group_name=row["trial"], model_uri=str(row.get("run_dir") or ""),
                                             start_time_secs=time.time())
    for name, value in row["params"].items():
        if isinstance(value, bool):  # before int: a bool is an int
            start.hparams[name].bool_value = value
        elif isinstance(value, (int, float)):
            start.hparams[name].number_value = value
        elif isinstance(value, str):
            start.hparams[name].string_value = value
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.Status.Value(STATUS.get(row.get("status") or "",
                                                                                 "STATUS_UNKNOWN")),
                                         end_time_secs=time.time())
    return [_summary(metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=start)),
            _summary(metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end))]


def _summary(tag: str, data: Any) -> Any:
    """A summary holding the plugin's ``data``, as :mod:`tensorboard.plugins.hparams.summary` makes it
    (that module imports TensorFlow; its protos and metadata do not)."""
    from tensorboard.compat.proto import summary_pb2  # noqa: PLC0415
    from tensorboard.plugins.hparams import metadata  # noqa: PLC0415

    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR)])


def _hparam_info(param: searchspace.Param) -> Any:
    from google.protobuf import struct_pb2  # noqa: PLC0415
    from tensorboard.plugins.hparams import api_pb2  # noqa: PLC0415

    if param.kind != "grid":
        return api_pb2.HParamInfo(name=param.name, type=api_pb2.DATA_TYPE_FLOAT64,
                                  domain_interval=api_pb2.Interval(min_value=param.low, max_value=param.high))
    values = [struct_pb2.Value(string_value=v) if isinstance(v, str) else
              struct_pb2.Value(bool_value=v) if isinstance(v, bool) else struct_pb2.Value(number_value=v)
              for v in param.values]
    return api_pb2.HParamInfo(name=param.name, type=_data_type(param.values),
                              domain_discrete=struct_pb2.ListValue(values=values))


def _data_type(values: Iterable[Any]) -> int:
    from tensorboard.plugins.hparams import api_pb2  # noqa: PLC0415

    kinds = {type(v) for v in values}
    if kinds == {bool}:
        return api_pb2.DATA_TYPE_BOOL
    if kinds and kinds <= {int, float}:
        return api_pb2.DATA_TYPE_FLOAT64
    return api_pb2.DATA_TYPE_STRING


def _scalar_tags(path: Path) -> set[str]:
    """The scalar tags of one event file, as far as it is complete (a run may still be writing it).

    Records are read here rather than with TensorBoard's ``EventFileLoader``, which without
    TensorFlow checks each record's CRC in pure Python (3 s for 40,000 scalars); only the tags
    are taken, so a damaged record just ends the reading."""
    from google.protobuf.message import DecodeError  # noqa: PLC0415
    from tensorboard.compat.proto import event_pb2  # noqa: PLC0415

    try:
        data = path.read_bytes()
    except OSError as e:
        raise RunError(f"cannot read the TensorBoard events {path}: {e.strerror}") from None
    tags: set[str] = set()
    at = 0
    while at + RECORD_HEAD <= len(data):  # a record: length (u64), its CRC (u32), the event, its CRC (u32)
        (length,) = struct.unpack_from("<Q", data, at)
        end = at + RECORD_HEAD + length + 4
        if end > len(data):
            break
        try:
            event = event_pb2.Event.FromString(data[at + RECORD_HEAD:end - 4])
        except DecodeError:
            break
        tags.update(v.tag for v in event.summary.value if v.metadata.plugin_data.plugin_name in ("", "scalars")
                    and v.WhichOneof("value") in ("simple_value", "tensor"))
        at = end
    return tags


def _write_events(path: Path, summaries: list[Any]) -> None:
    """``summaries`` as one event file at ``path``, replacing it whole."""
    from tensorboard.compat.proto import event_pb2  # noqa: PLC0415
    from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: PLC0415

    buffer = io.BytesIO()
    records = RecordWriter(buffer)
    now = time.time()
    records.write(event_pb2.Event(wall_time=now, file_version="brain.Event:2").SerializeToString())
    for summary in summaries:
        records.write(event_pb2.Event(wall_time=now, step=0, summary=summary).SerializeToString())
    fsio.write_atomic(path, buffer.getvalue(), RunError)


def _remove_others(sweep_dir: Path, written: set[Path]) -> None:
    """This module's files that this write did not make: the session of a trial that has a run now
    (or no longer exists), and the temporary siblings a killed write left."""
    suffix = Path(FILE).suffix
    for pattern in (f"*{suffix}", f"*/*{suffix}", f"{NO_RUN}/*/*{suffix}"):
        for path in sweep_dir.glob(pattern):
            if path.resolve() not in written:
                _unlink(path)
    for folder in [*sweep_dir.glob(f"{NO_RUN}/*/"), sweep_dir / NO_RUN]:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when nothing is left in it


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as e:
        raise RunError(f"cannot remove the HParams summary {path}: {e.strerror}") from None
