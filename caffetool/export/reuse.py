"""Verified exports made once and reused: what the ``onnxruntime``, ``opencv`` and ``pytorch`` backends run.

A run's export lives in its export folder (the user's: a changed export there is refused, never
replaced). Any other deploy net and weights get an entry in caffetool's cache, one folder per pair,
which is caffetool's alone: an entry is served only where its record is the one caffetool sealed and
vouches for these inputs and every file as it is now; anything else there is damage (a model cut
short, a record missing, unreadable or rewritten), removed and exported again, said in one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

from caffetool import config, fsio
from caffetool.checksum import sha256_file
from caffetool.engine import EngineInfo
from caffetool.errors import ExportError
from caffetool.export import exporter, formats
from caffetool.export.request import ExportRequest
from caffetool.inference import modelfiles


def verified_export(engine: EngineInfo, files: modelfiles.ModelFiles, to: str = formats.DEFAULT.name,
                    say: Callable[[str], None] = print) -> Path:
    """The verified export to ``to`` of exactly these deploy net and weights (its record's sha256s of
    them and of every file written match), made now if missing or stale: a run's in its export folder,
    other files' in caffetool's cache (one folder per pair of deploy and weights). The model file: what
    the ``onnxruntime`` backend runs and OpenCV 5's; a PyTorch export's ``model.py`` for the PyTorch
    backend."""
    form = formats.named(to)
    if files.run is not None:
        request = exporter.run_request(files.run, files=files, to=form.name)
        if not _fresh(request.out, files, form):
            say(f"exporting {files.run.name} to {form.title} ({request.out}), verified against Caffe first")
            exporter.export(engine, request, say=lambda _: None)
        return request.out
    return _cached_export(engine, files, form, say)


def _cached_export(engine: EngineInfo, files: modelfiles.ModelFiles, form: formats.ExportFormat,
                   say: Callable[[str], None]) -> Path:
    """The cache's export of a deploy net and weights, served only where its record is the one caffetool
    sealed (:func:`_seal_of`) and vouches for these inputs and every file as it is now; anything else
    in the entry is damage (a model cut short, a record missing, unreadable or rewritten), removed and
    exported again, said in one line: the cache is caffetool's alone, so nothing there blocks a backend."""
    pair = sha256_file(Path(files.deploy)) + sha256_file(Path(files.weights))
    entry = config.cache_home() / "exports" / hashlib.sha256(pair.encode()).hexdigest()[:16]
    request = ExportRequest(files, entry / f"{exporter.RUN_MODEL}{form.suffix}", to=form.name)
    damage = _cache_damage(request.out, files, form)
    if damage is None:
        return request.out
    named = Path(files.weights).name
    if damage:
        say(f"the cached {form.title} export of {named} is damaged ({damage}): exporting it again to "
            f"{request.out}, verified against Caffe first")
    else:
        say(f"exporting {named} to {form.title} ({request.out}), verified against Caffe first")
    for path in (*exporter.written_files(request.out), exporter.record_of(request.out), _seal_of(request.out)):
        _remove(path)
    exporter.export(engine, request, say=lambda _: None)
    record = exporter.record_of(request.out)
    fsio.write_atomic(_seal_of(request.out), hashlib.sha256(record.read_bytes()).hexdigest() + "\n", ExportError)
    return request.out


def _seal_of(model: Path) -> Path:
    """A cache entry's seal of ``model``'s record: the sha256 of the record as caffetool wrote it."""
    record = exporter.record_of(model)
    return record.with_name(record.name + ".sha256")


def _cache_damage(model: Path, files: modelfiles.ModelFiles, form: formats.ExportFormat) -> str | None:
    """What is wrong with a cache entry's export of ``model``, in a few words; None when it is served as
    it is, "" when there is none yet."""
    record, seal = exporter.record_of(model), _seal_of(model)
    present = [p for p in (*exporter.written_files(model), record, seal) if p.exists() or p.is_symlink()]
    if not present:
        return ""
    for path in (*exporter.written_files(model), record, seal):
        if not path.is_file():
            return f"no {path.name}" if path not in present else f"{path.name} is not a file"
    try:
        sealed = seal.read_text().strip()
        wrote = hashlib.sha256(record.read_bytes()).hexdigest()
    except OSError as e:
        return f"{record.name} cannot be read: {e.strerror}"
    if sealed != wrote:
        return f"{record.name} is not the record caffetool wrote there: changed since, or never sealed"
    made = exporter.read_record(record)
    verified = made.get("verification")
    if made.get("model") != model.name or not isinstance(verified, dict) or verified.get("passed") is not True:
        return f"{record.name} is not a passed export of {model.name}"
    if not _fresh(model, files, form):
        return f"its files are not those {record.name} vouches for: changed or cut short"
    return None


def _remove(path: Path) -> None:
    """A cache entry's file, or whatever took its name (a folder), gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _fresh(model: Path, files: modelfiles.ModelFiles, form: formats.ExportFormat) -> bool:
    """Whether ``model``'s record vouches for these deploy net and weights and for every file written as
    it is now, and is of the plain export :func:`verified_export` serves."""
    record = exporter.record_for(model)
    made = exporter.read_record(record) if record is not None else {}
    sha = made.get("sha256")
    if not isinstance(sha, dict) or any(made.get(key) for key in form.not_served):
        return False
    try:
        return (sha.get("weights") == sha256_file(Path(files.weights))
                and sha.get("deploy") == sha256_file(Path(files.deploy))
                and all(sha.get(exporter.sha_key(path)) == sha256_file(path) for path in exporter.written_files(model)))
    except OSError:
        return False
