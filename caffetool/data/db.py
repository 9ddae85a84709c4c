"""Key-value databases in the two formats Caffe's Data layer reads: LMDB and LevelDB.

Keys are ``%08d`` in file order and values are serialised ``Datum``s, exactly as Caffe's
``convert_mnist_data`` writes them. Writes go in transactions of one chunk; an LMDB map that
fills up is doubled and the chunk retried, so no size has to be guessed right in advance.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import lmdb

from caffetool.errors import ConfigError

BACKENDS = ("lmdb", "leveldb")
INITIAL_MAP_SIZE = 64 << 20


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ConfigError(f"unknown --backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    return name


def detect_backend(path: Path) -> str:
    if (path / "data.mdb").exists():
        return "lmdb"
    if (path / "CURRENT").exists():
        return "leveldb"
    raise ConfigError(f"{path} is neither an LMDB nor a LevelDB database")


class Writer:
    """Append-only writer of one new database directory (it must not exist yet)."""

    def __init__(self, path: Path, backend: str, map_size: int = INITIAL_MAP_SIZE) -> None:
        """``map_size`` is LMDB's first map size; an estimate avoids regrowing, but any works."""
        self.path, self.backend = path, check_backend(backend)
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
        if self.backend == "lmdb":
            self.env.sync(True)
            self.env.close()
        else:
            self.db.close()


def keys(start: int, count: int) -> list[bytes]:
    return [b"%08d" % i for i in range(start, start + count)]


def read(path: Path, limit: int | None = None) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) pairs in key order, from either backend."""
    backend = detect_backend(path)
    if backend == "lmdb":
        env = lmdb.open(str(path), readonly=True, lock=False, subdir=True)
        try:
            with env.begin() as txn:
                for i, (key, value) in enumerate(txn.cursor()):
                    if limit is not None and i >= limit:
                        break
                    yield bytes(key), bytes(value)
        finally:
            env.close()
    else:
        import plyvel  # noqa: PLC0415

        db = plyvel.DB(str(path), create_if_missing=False)
        try:
            for i, (key, value) in enumerate(db.iterator()):
                if limit is not None and i >= limit:
                    break
                yield key, value
        finally:
            db.close()


def count(path: Path) -> int:
    if detect_backend(path) == "lmdb":
        env = lmdb.open(str(path), readonly=True, lock=False, subdir=True)
        try:
            return env.stat()["entries"]
        finally:
            env.close()
    return sum(1 for _ in read(path))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
