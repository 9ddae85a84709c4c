"""``caffetool data.*``: fetch data sets or convert your own images into Caffe databases, inspect them, compute means."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection, Context

from caffetool.choices import SECONDS, Limit, bounded, choose, input_file, number, output_file, writable_folder
from caffetool.data import convert, fetch, imageset, layout, lookup, mean, registry
from caffetool.engine import locate
from caffetool.tasks._common import chosen_folder, pick, task

DATASET_HELP = f"data set: {', '.join(registry.DATASETS)}, or a folder made by data.images"
FETCH_HELP = f"data set to fetch: {', '.join(registry.DATASETS)}"
PER_CLASS = Limit("a number of samples per class", 1, 1000, kind=int)
SPLITS = ("train", "test")


@task(name="fetch", help={
    "dataset": FETCH_HELP,
    "source": "folder or base URL holding the IDX files (tried before system copies and mirrors)",
    "backend": "database format: lmdb or leveldb",
    "force": "rebuild the databases even if present",
    "data_dir": "where data sets go (default: data.dir, ./data)",
    "timeout": "seconds a mirror may stay silent before the next is tried (default 30)",
})
def fetch_(c: Context, dataset: str | None = None, source: str | None = None, backend: str = "lmdb",
          force: bool = False, data_dir: str | None = None, timeout: str = "30") -> None:
    """Fetch, verify and convert a data set into train/test databases."""
    spec = registry.get(pick(dataset, c.data.dataset))
    seconds = bounded(timeout, "--timeout", SECONDS)
    folder = chosen_folder(data_dir, c.data.dir, "--data-dir", "data.dir")
    result = fetch.fetch(spec, folder, source, backend, force, seconds)
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
    samples = bounded(per_class, "--per-class", PER_CLASS)
    ds = lookup.find(pick(dataset, c.data.dataset), chosen_folder(data_dir, c.data.dir, "--data-dir", "data.dir"))
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


@task(name="mean", help={"dataset": DATASET_HELP, "data_dir": "where data sets are", "split": "train or test",
                         "db": "any LMDB or LevelDB instead of a data set's (raw or encoded images)",
                         "out": "with --db: the .binaryproto to write (default: mean.binaryproto beside the database)"})
def mean_(c: Context, dataset: str | None = None, data_dir: str | None = None, split: str = "train",
          db: str | None = None, out: str | None = None) -> None:
    """Write a mean image as mean.binaryproto (as compute_image_mean does)."""
    engine = locate(c.engine.prefix, probe=False)
    if db is not None:
        source = Path(db).expanduser()
        target = output_file(out, "--out") if out else source.absolute().parent / "mean.binaryproto"
        what = "records"
    else:
        split = choose(split, SPLITS, "--split")
        ds = lookup.find(pick(dataset, c.data.dataset),
                         chosen_folder(data_dir, c.data.dir, "--data-dir", "data.dir"))
        source = ds.db(split)
        target = ds.path / ("mean.binaryproto" if split == "train" else f"mean_{split}.binaryproto")
        what = f"{split} images"
    image, count = mean.mean_image(source, engine)
    written = mean.write_binaryproto(image, target, engine)
    print(f"mean of {count} {what} (overall {image.mean():.3f}) written to {written}")


@task(name="convert", help={"images": "IDX images file (raw or .gz)", "labels": "IDX labels file (raw or .gz)",
            "out": "database directory to create", "backend": "lmdb or leveldb"})
def convert_(c: Context, images: str, labels: str, out: str, backend: str = "lmdb") -> None:
    """Convert any IDX images + labels pair into a Caffe database (convert_mnist_data's job)."""
    stats = convert.convert(input_file(images, "--images"), input_file(labels, "--labels"),
                                writable_folder(out, "--out"), backend, progress=True)
    print(f"{stats.count} images ({'x'.join(map(str, stats.shape))}) written to {out} as {backend}")


@task(name="images", help={
    "root": "folder of images: one sub-folder per class, or the folder a --list's paths start from",
    "list": "Caffe's list file of `PATH LABEL` lines (paths relative to ROOT) instead of class folders",
    "out": "data set folder to write (default: DATA_DIR/<ROOT's name>)",
    "data_dir": "where data sets go when --out is not given (default: data.dir, ./data)",
    "backend": "database format: lmdb or leveldb",
    "resize_height": "resize every image to this height (with --resize-width), as convert_imageset does",
    "resize_width": "resize every image to this width (with --resize-height)",
    "gray": "read images as one gray channel",
    "encoded": "store encoded images (the files' own bytes where they fit) instead of raw pixels",
    "encode_type": f"re-encode every image as one of: {', '.join(imageset.ENCODE_TYPES)} (implies --encoded)",
    "shuffle": "shuffle the list with --seed (saved as train.txt/test.txt beside the databases)",
    "seed": "seed of --shuffle and --val-fraction (default 0)",
    "val_fraction": "fraction of the images, chosen with --seed, written to test_<backend> (0 to 1)",
    "strict": "refuse a file OpenCV cannot read (or a truncated JPEG) instead of naming and skipping (storing) it",
    "mixed_sizes": "keep images of different sizes (for a net whose data layer crops them to one size); "
                   "otherwise they are refused, and --resize-height/--resize-width give them one",
    "force": "replace the output folder if it exists",
})
def images(c: Context, root: str, list_: str | None = None, out: str | None = None, data_dir: str | None = None,
           backend: str = "lmdb", resize_height: str = "0", resize_width: str = "0", gray: bool = False,
           encoded: bool = False, encode_type: str = "", shuffle: bool = False, seed: str = "0",
           val_fraction: str = "0", strict: bool = False, force: bool = False, mixed_sizes: bool = False) -> None:
    """Write your own images into Caffe databases, record for record as convert_imageset does."""
    options = imageset.ImagesetFlags(number(resize_height, "--resize-height", int, minimum=0) or 0,
                                number(resize_width, "--resize-width", int, minimum=0) or 0,
                                gray, encoded, encode_type, backend, mixed_sizes)
    fraction = number(val_fraction, "--val-fraction", minimum=0, maximum=1) or 0.0
    folder = Path(root).expanduser()
    target = (Path(out).expanduser() if out
              else chosen_folder(data_dir, c.data.dir, "--data-dir", "data.dir") / folder.absolute().name)
    result = imageset.build(folder, target.absolute(), options,
                             list_file=input_file(list_, "--list") if list_ else None, shuffle=shuffle,
                             seed=number(seed, "--seed", int, minimum=0) or 0, val_fraction=fraction,
                             strict=strict, force=force, progress=True)
    for name, split in result.splits.items():
        skipped = f", {len(split.skipped)} skipped" if split.skipped else ""
        skipped += f", {len(split.damaged)} damaged" if split.damaged else ""
        print(f"{name}: {split.count} images{skipped} in {result.path / f'{name}_{options.backend}'}")
    print(f"{len(result.classes)} classes in {result.path / layout.LABELS}")


ns = Collection("data", fetch_, info, mean_, convert_, images)
