"""Writing results so that a failure never leaves a half-written one that looks finished.

Two mechanisms, used by everything that writes a file or a folder a user relies on (a manifest,
metrics, plots, a mean image, a data set, a generated model, an engine prefix):

- :func:`write_atomic` / :func:`atomic_file`: write a temporary sibling, ``fsync`` it, and
  ``os.replace`` it over the target, so a reader sees the old file or the new one, never a part.
- :func:`staged_dir`: build a folder inside a staging sibling and rename it into place only when the
  block finishes. A staging folder holds its owner's pid, so one left by a killed process is
  recognised and removed by the next call. Replacing an existing folder is one atomic exchange
  (Linux ``renameat2(RENAME_EXCHANGE)``); where the file system lacks it, the old folder is renamed
  aside *after* the new one is complete and restored by the next call if a kill lands between the
  two renames. Builders that need room beside the result (an engine's source and build trees)
  use the same staging folder through :func:`staging_folder` and :func:`move_into_place`.

Replacing is only ever done to what caffetool made: :func:`check_replaceable` refuses a target that
is a file, that is or holds one of the job's inputs, or that is a folder of someone else's files,
before anything is written (``--force`` means "replace caffetool's own result", never "delete").

Each takes an optional error class: a failure to write (disk full, a read-only folder, a file
where a folder should be) is then raised as that caffetool error, ``cannot write PATH: REASON``.

Limits: the temporary siblings live in the target's own directory (a rename never crosses file
systems), so that directory must be writable. A replaced file gets the permissions a plain write
gives under the umask, not the old file's. A kill during :func:`atomic_file` can leave its hidden
``.NAME.tmp-*`` sibling behind (it never replaces anything); only staging folders are reclaimed.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

STAGING_MARK = ".staging-"
OWNER_FILE = "pid"
BUILT = "built"
REPLACED = "replaced"
FRESH_S = 60.0
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def write_atomic(path: Path, data: str | bytes, error: type[Exception] | None = None) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) in one rename.

    With ``error``, a failure to write (disk full, a read-only folder, a file where a folder should
    be) is raised as ``error("cannot write PATH: REASON")`` rather than as the bare ``OSError``.
    """
    with atomic_file(path, error) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)


def check_replaceable(target: Path, ours: Callable[[Path], bool], what: str, inputs: Iterable[Path] = (),
                      error: type[Exception] = OSError) -> None:
    """Refuse to replace ``target`` unless it is absent, an empty folder, or ``what`` caffetool made
    (``ours(target)``, e.g. a folder with caffetool's manifest); also refuse a ``target`` that is or
    holds one of ``inputs``, which replacing it would delete. Nothing is changed either way."""
    if not target.exists() and not target.is_symlink():
        return
    real = target.resolve()
    for given in inputs:
        source = Path(given).resolve()
        if source == real or real in source.parents:
            raise error(f"{target} {'is' if source == real else 'holds'} the input {given}, which replacing it "
                        f"would delete; write {what} somewhere else (nothing was changed)")
    if not target.is_dir():
        raise error(f"{target} is a file, not {what}; choose another place (nothing was changed)")
    if ours(target):
        return
    entries = sorted(p.name for p in target.iterdir())
    if entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise error(f"{target} holds files caffetool did not make ({shown}), not {what}; caffetool replaces only "
                    f"{what} it made itself: choose an empty or new folder (nothing was changed)")


@contextmanager
def atomic_file(path: Path, error: type[Exception] | None = None) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write by any means; it replaces ``path`` on success.

    For writers that want a file name rather than bytes (``savefig``, ``csv``, LMDB tools); the
    sibling keeps ``path``'s suffix so such writers pick the same format. ``error`` is as for
    :func:`write_atomic`; it also covers an ``OSError`` raised by the block, which is writing.
    ``path``'s folder is created if missing.
    """
    path = Path(path)
    tmp: Path | None = None
    try:
        with _failing_as(error, path):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = _new_sibling(path)
            yield tmp
            _fsync(tmp)
            os.replace(tmp, path)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


@contextmanager
def staged_dir(final: Path, error: type[Exception] | None = None) -> Iterator[Path]:
    """Yield an empty folder to fill; on success it becomes ``final``, replacing any folder there.

    On failure (an exception, Ctrl-C) nothing at ``final`` changes and the staging folder goes; on
    a kill it stays, marked with the dead pid, and the next :func:`staged_dir` or
    :func:`remove_stale` for the same ``final`` removes it. ``error`` names a failure to make
    the staging folder or to move the result into place, as for :func:`write_atomic`; what the
    block raises is the block's own.
    """
    with staging_folder(final, error) as staging:
        built = staging / BUILT
        built.mkdir()
        yield built
        move_into_place(built, final, staging, error)


@contextmanager
def staging_folder(final: Path, error: type[Exception] | None = None) -> Iterator[Path]:
    """Yield a new folder beside ``final``, marked as this process's, removed when the block ends.

    For builders that need room beside the result (a source tree, a build tree): they make the
    result anywhere inside and :func:`move_into_place` it. :func:`staged_dir` is this for the
    common case. ``final``'s parent is created if missing; ``error`` is as for :func:`staged_dir`.
    """
    final = Path(final)
    with _failing_as(error, final):
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(final)
        staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}{STAGING_MARK}"))
    try:
        with _failing_as(error, final):
            (staging / OWNER_FILE).write_text(str(os.getpid()))
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def move_into_place(built: Path, final: Path, staging: Path, error: type[Exception] | None = None) -> None:
    """Make ``built`` (a complete folder inside ``staging``) be ``final``.

    A folder already at ``final`` ends up inside ``staging`` (removed with it): exchanged in one
    step where the file system can, else renamed aside only now that ``built`` is complete.
    """
    with _failing_as(error, final):
        if not os.path.lexists(final):
            os.rename(built, final)
        elif not _exchange(built, final):
            _rename_aside_then_in(built, final, staging)


def staging_folders(final: Path) -> list[Path]:
    """The staging folders of ``final`` now on disk, live or stale."""
    final = Path(final)
    return sorted(final.parent.glob(f".{final.name}{STAGING_MARK}*"))


def remove_stale(final: Path) -> None:
    """Delete ``final``'s staging folders whose owner is gone, first restoring an interrupted swap.

    A kill between the two renames of the fallback swap leaves no ``final`` and the old folder in
    a staging folder as ``replaced``: it is moved back, so the previous result is never lost.
    """
    for staging in staging_folders(final):
        if _owner_alive(staging):
            continue
        replaced = staging / REPLACED
        if replaced.is_dir() and not os.path.lexists(final):
            os.rename(replaced, final)
        shutil.rmtree(staging, ignore_errors=True)


def _rename_aside_then_in(built: Path, final: Path, staging: Path) -> None:
    """Two renames: a kill between them leaves no ``final``, which :func:`remove_stale` repairs."""
    os.rename(final, staging / REPLACED)
    os.rename(built, final)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where the kernel or file system cannot."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _owner_alive(staging: Path) -> bool:
    try:
        pid = int((staging / OWNER_FILE).read_text())
    except (OSError, ValueError):
        # just created by mkdtemp, its owner about to write the pid: leave young folders alone
        return _age_s(staging) < FRESH_S
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _age_s(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")


@contextmanager
def _failing_as(error: type[Exception] | None, path: Path) -> Iterator[None]:
    """Raise an ``OSError`` of the block as ``error("cannot write PATH: REASON")`` (if ``error``)."""
    try:
        yield
    except OSError as e:
        if error is None:
            raise
        raise error(f"cannot write {path}: {_reason(e, path)}") from e


def _reason(e: OSError, path: Path) -> str:
    """The error's text, naming the folder on the way to ``path`` when that is what failed."""
    where = Path(e.filename) if e.filename else None
    if where is None or where not in path.parents:
        return e.strerror or str(e)
    if isinstance(e, (FileExistsError, NotADirectoryError)):
        blocker = next((p for p in (where, *where.parents) if p.exists() and not p.is_dir()), where)
        return f"{blocker} is a file, not a folder"
    return f"{e.strerror}: {where}"


def _new_sibling(path: Path) -> Path:
    """A new empty file beside ``path``, made with the permissions ``open`` gives (the umask
    applies), not ``mkstemp``'s owner-only ones, so the result is as readable as a plain write."""
    while True:
        tmp = path.with_name(f".{path.stem}.tmp-{secrets.token_hex(4)}{path.suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())
