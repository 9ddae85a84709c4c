"""Key-value databases in the two formats Caffe's Data layer reads: LMDB and LevelDB.

Keys are ``%08d`` in file order and values are serialised ``Datum``s, exactly as Caffe's
``convert_mnist_data`` writes them. Writes go in transactions of one chunk; an LMDB map that
fills up is doubled and the chunk retried, so no size has to be guessed right in advance.

Reading checks an LMDB file is whole before touching its records: LMDB maps the file into
memory, and a page past the end of a truncated file kills the reader with SIGBUS (Caffe and
Python alike) instead of raising. Every failure of either library becomes a :class:`DataError`
naming the database.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any

import lmdb

from caffetool.choices import choose, nearest_existing
from caffetool.errors import DataError

BACKENDS = ("lmdb", "leveldb")
INITIAL_MAP_SIZE = 64 << 20
LMDB_FILE = "data.mdb"


def check_backend(name: str) -> str:
    """The canonical name of the ``--backend`` given (any case), or a ConfigError listing both."""
    return choose(name, BACKENDS, "--backend")


def detect_backend(path: Path) -> str:
    if (path / LMDB_FILE).exists():
        return "lmdb"
    if (path / "CURRENT").exists():
        return "leveldb"
    raise DataError(f"{path} is neither an LMDB nor a LevelDB database")


class Writer:
    """Append-only writer of one new database directory (it must not exist yet).

    A write that fails (a full disk shows as LMDB's "Input/output error") raises DataError
    naming the database and the space left on its file system.
    """

    def __init__(self, path: Path, backend: str, map_size: int = INITIAL_MAP_SIZE) -> None:
        """``map_size`` is LMDB's first map size; an estimate avoids regrowing, but any works."""
        self.path, self.backend = path, check_backend(backend)
        with self._failing("create"):
            if backend == "lmdb":
                # No fsync per commit: the caller renames the finished directory into place, and
                # close() syncs once; a crash before that leaves only a temporary folder.
                self.env = lmdb.open(str(path), map_size=map_size, subdir=True, sync=False,
                                     metasync=False, meminit=False, map_async=False)
            else:
                import plyvel  # noqa: PLC0415 - only LevelDB users need it loaded

                # Caffe's db_leveldb uses a 256 MiB write buffer; matching it keeps writes alike.
                self.db = plyvel.DB(str(path), create_if_missing=True, error_if_exists=True,
                                    write_buffer_size=268_435_456)

    def put_chunk(self, keys: Sequence[bytes], values: Sequence[bytes] | Sequence[memoryview]) -> None:
        with self._failing("write"):
            if self.backend == "leveldb":
                with self.db.write_batch() as batch:
                    for key, value in zip(keys, values):
                        batch.put(key, bytes(value))
                return
            while True:
                try:
                    with self.env.begin(write=True) as txn:
                        txn.cursor().putmulti(zip(keys, values), append=True)
                    return
                except lmdb.MapFullError:
                    self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def close(self) -> None:
        with self._failing("write"):
            if self.backend == "lmdb":
                try:
                    self.env.sync(True)
                finally:
                    self.env.close()
            else:
                self.db.close()

    @contextmanager
    def _failing(self, action: str) -> Iterator[None]:
        try:
            yield
        except _errors() as e:
            raise DataError(f"could not {action} {self.path}: {_reason(e)} "
                            f"({_free(self.path)} left on its file system)") from e


def keys(start: int, count: int) -> list[bytes]:
    return [b"%08d" % i for i in range(start, start + count)]


def read(path: Path, limit: int | None = None) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) pairs in key order, from either backend; a damaged database raises DataError."""
    backend = detect_backend(path)
    with _opened(path, backend) as handle, _reading(path):
        if backend == "lmdb":
            with handle.begin() as txn:
                for key, value in islice(txn.cursor(), limit):
                    yield bytes(key), bytes(value)
        else:
            yield from islice(handle.iterator(), limit)


def count(path: Path) -> int:
    """The number of records, walked key by key (an LMDB's own count is metadata, not proof)."""
    backend = detect_backend(path)
    with _opened(path, backend) as handle, _reading(path):
        if backend == "lmdb":
            with handle.begin() as txn:
                return sum(1 for _ in txn.cursor().iternext(keys=True, values=False))
        return sum(1 for _ in handle.iterator(include_value=False))


def check(path: Path) -> int | None:
    """Raise DataError if the database at ``path`` is damaged; return its count where that is cheap.

    An LMDB's keys are walked (about 0.03 s for 70,000 records, every page known to be in the file
    first). A LevelDB is only opened: walking it costs ten times more, and a damaged table is named
    by LevelDB itself when read, without the SIGBUS risk of a memory-mapped LMDB.
    """
    if detect_backend(path) == "lmdb":
        return count(path)
    with _opened(path, "leveldb"):
        return None


def check_lmdb_size(env: lmdb.Environment, path: Path) -> None:
    """Raise DataError if ``path``'s data file ends before LMDB's last page (a truncated copy).

    The last page in use is in the meta page, at the start of the file, so this reads nothing
    that could be missing.
    """
    need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    size = (path / LMDB_FILE).stat().st_size
    if size < need:
        raise DataError(f"{path} is truncated: {LMDB_FILE} holds {size} bytes, its last page ends at byte {need}")


@contextmanager
def _opened(path: Path, backend: str) -> Iterator[Any]:
    """The database opened for reading; an LMDB only once every page is known to be in its file."""
    if backend == "lmdb" and (path / LMDB_FILE).stat().st_size == 0:
        raise DataError(f"{path} is empty: its {LMDB_FILE} holds 0 bytes")
    try:
        if backend == "lmdb":
            handle = lmdb.open(str(path), readonly=True, lock=False, subdir=True)
        else:
            import plyvel  # noqa: PLC0415 - only LevelDB users need it loaded

            handle = plyvel.DB(str(path), create_if_missing=False)
    except _errors() as e:
        kind = "LMDB" if backend == "lmdb" else "LevelDB"
        raise DataError(f"{path} is not a readable {kind} database ({_reason(e)})") from e
    try:
        if backend == "lmdb":
            check_lmdb_size(handle, path)
        yield handle
    finally:
        handle.close()


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Report a record that cannot be read (a damaged page or table) as a DataError naming ``path``."""
    try:
        yield
    except _errors() as e:
        raise DataError(f"{path} is damaged: {_reason(e)}") from e


def _errors() -> tuple[type[Exception], ...]:
    """What either library raises for a bad database or a failed write (plyvel only once loaded)."""
    plyvel = sys.modules.get("plyvel")
    return (lmdb.Error, OSError) + ((plyvel.Error,) if plyvel is not None else ())


def _reason(error: Exception) -> str:
    text = error.args[0] if error.args else str(error)
    return text.decode(errors="replace") if isinstance(text, bytes) else str(text)


def _free(path: Path) -> str:
    return f"{shutil.disk_usage(nearest_existing(path)).free / 1e6:.1f} MB"


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
