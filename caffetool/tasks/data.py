"""``invoke data.*``: fetch data sets into Caffe databases, inspect them, compute their mean."""

from __future__ import annotations

from invoke import Collection, Context

from caffetool.choices import SECONDS, Limit, bounded, choose, input_file, writable_folder
from caffetool.data import convert as idx_convert
from caffetool.data import fetch as data_fetch
from caffetool.data import layout, mean, registry
from caffetool.engine import locate
from caffetool.tasks._common import pick, task

DATASET_HELP = f"data set: {', '.join(registry.DATASETS)}"
PER_CLASS = Limit("a number of samples per class", 1, 1000, kind=int)
SPLITS = ("train", "test")


@task(help={
    "dataset": DATASET_HELP,
    "source": "folder or base URL holding the IDX files (tried before system copies and mirrors)",
    "backend": "database format: lmdb or leveldb",
    "force": "rebuild the databases even if present",
    "data_dir": "where data sets go (default: data.dir, ./data)",
    "timeout": "seconds a mirror may stay silent before the next is tried (default 30)",
})
def fetch(c: Context, dataset: str | None = None, source: str | None = None, backend: str = "lmdb",
          force: bool = False, data_dir: str | None = None, timeout: str = "30") -> None:
    """Fetch, verify and convert a data set into train/test databases."""
    spec = registry.get(pick(dataset, c.data.dataset))
    seconds = bounded(timeout, "--timeout", SECONDS)
    folder = writable_folder(pick(data_dir, c.data.dir), "--data-dir", "data.dir")
    result = data_fetch.fetch(spec, folder, source, backend, force, seconds)
    ds = result.dataset
    if result.cached:
        print(f"{spec.name}: already present and verified in {ds.path} — nothing to do "
              "(--force rebuilds it)")
        return
    print(f"{spec.name}: {ds.count('train')} train + {ds.count('test')} test images "
          f"({'x'.join(map(str, ds.shape))}) as {ds.backend} in {ds.path} in {result.seconds:.1f} s")


@task(help={"dataset": DATASET_HELP, "data_dir": "where data sets are",
            "per_class": "samples per class in the contact sheet, 1 to 1000 (default 12)"})
def info(c: Context, dataset: str | None = None, data_dir: str | None = None, per_class: str = "12") -> None:
    """Counts, class histogram, checksums and a PNG contact sheet of a data set."""
    spec = registry.get(pick(dataset, c.data.dataset))
    samples = bounded(per_class, "--per-class", PER_CLASS)
    ds = layout.load(spec, writable_folder(pick(data_dir, c.data.dir), "--data-dir", "data.dir"))
    m = ds.manifest
    print(f"{m['title']} — {ds.path} ({ds.backend}, images {'x'.join(map(str, ds.shape))})")
    width = max(len(name) for name in ds.classes)
    print(f"  {'class':<{width + 4}} {'train':>7} {'test':>7}")
    for k, name in enumerate(ds.classes):
        print(f"  {k:>2} {name:<{width + 1}} {m['splits']['train']['histogram'][k]:>7} "
              f"{m['splits']['test']['histogram'][k]:>7}")
    print(f"  {'total':<{width + 4}} {ds.count('train'):>7} {ds.count('test'):>7}")
    for f in m["files"].values():
        print(f"  {f['name']:<28} sha256 {f['sha256']}  from {f['source']}")
    from caffetool.data import sheet  # noqa: PLC0415 - OpenCV only when drawing

    out = sheet.contact_sheet(ds.db("train"), ds.classes, ds.path / "contact_sheet.png",
                              locate(c.engine.prefix, probe=False), samples)
    print(f"contact sheet: {out}")


@task(name="mean", help={"dataset": DATASET_HELP, "data_dir": "where data sets are", "split": "train or test"})
def mean_(c: Context, dataset: str | None = None, data_dir: str | None = None, split: str = "train") -> None:
    """Write the data set's mean image as mean.binaryproto (as compute_image_mean does)."""
    spec = registry.get(pick(dataset, c.data.dataset))
    split = choose(split, SPLITS, "--split")
    ds = layout.load(spec, writable_folder(pick(data_dir, c.data.dir), "--data-dir", "data.dir"))
    engine = locate(c.engine.prefix, probe=False)
    image, count = mean.mean_image(ds.db(split), engine)
    out = mean.write_binaryproto(image, ds.path / ("mean.binaryproto" if split == "train" else f"mean_{split}.binaryproto"),
                                 engine)
    print(f"mean of {count} {split} images (overall {image.mean():.3f}) written to {out}")


@task(help={"images": "IDX images file (raw or .gz)", "labels": "IDX labels file (raw or .gz)",
            "out": "database directory to create", "backend": "lmdb or leveldb"})
def convert(c: Context, images: str, labels: str, out: str, backend: str = "lmdb") -> None:
    """Convert any IDX images + labels pair into a Caffe database (convert_mnist_data's job)."""
    stats = idx_convert.convert(input_file(images, "--images"), input_file(labels, "--labels"),
                                writable_folder(out, "--out"), backend, progress=True)
    print(f"{stats.count} images ({'x'.join(map(str, stats.shape))}) written to {out} as {backend}")


ns = Collection("data", fetch, info, mean_, convert)
