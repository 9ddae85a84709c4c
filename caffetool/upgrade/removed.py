"""The library calls old Caffe code makes that NumPy, SciPy, scikit-image and Pillow have since
removed, declared as data: each row is the old spelling, what replaces it, the release that removed
it and the release notes that say so. :mod:`caffetool.upgrade.fixers.fix_removed_apis` applies them.

Spellings are full module paths; the short names code binds them to (``np``, ``Image``, ``misc``,
``ndimage``, ``color``, ``io``) are read through :data:`SHORT_NAMES`. A row's ``how`` says what the
fixer does: ``name`` writes ``new`` in place of the old spelling (keeping the code's own prefix
where the new name lives in the same module, adding an ``import`` where it does not); ``keyword``
renames a keyword argument of the call ``old`` names; ``call`` is one of the fixer's own rewrites
(``fromstring``'s binary mode, ``asscalar``, ``tostring``); ``one-argument`` converts only a call
with one positional argument; ``check`` converts nothing. Where ``check`` text is given it goes to
the report with the line (for ``name`` rows, beside the change): the replacement behaves otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

SHORT_NAMES = {"np": "numpy", "Image": "PIL.Image", "misc": "scipy.misc", "ndimage": "scipy.ndimage",
               "color": "skimage.color", "io": "skimage.io", "measure": "skimage.measure"}


@dataclass(frozen=True)
class Removed:
    """One removed spelling and what replaces it."""

    old: str  # "numpy.float"; a keyword row: "skimage.io.imread(as_grey)"; a method: ".tostring"
    new: str  # "float"; "" where a person must choose
    removed_in: str
    source: str
    how: str = "name"
    check: str = ""


_NUMPY_ALIASES = "NumPy 1.20.0 release notes, Deprecations (the aliases of builtin types); removed by 1.24.0's"
_NUMPY_2 = "NumPy 2.0 migration guide, Changes to namespaces (NEP 52)"
_MISC = "SciPy 1.3.0 release notes, Backwards incompatible changes (scipy.misc image functions, deprecated in 1.0.0)"
_NDIMAGE = "SciPy 1.8.0 release notes, Deprecated features (scipy.ndimage's private submodules)"

REMOVED: tuple[Removed, ...] = (
    *(Removed(f"numpy.{old}", new, "NumPy 1.24", _NUMPY_ALIASES) for old, new in (
        ("float", "float"), ("int", "int"), ("bool", "bool"), ("object", "object"), ("str", "str"),
        ("long", "int"), ("unicode", "str"), ("complex", "complex"))),
    Removed("numpy.asscalar", "a.item()", "NumPy 1.23", "NumPy 1.23.0 release notes, Expired deprecations", "call"),
    Removed("numpy.rank", "numpy.ndim", "NumPy 1.18", "NumPy 1.18.0 release notes, Expired deprecations"),
    Removed("numpy.fromstring", "numpy.frombuffer", "NumPy 2.3 (its binary mode)",
            "NumPy 1.14.0 release notes, Deprecations: the binary mode of fromstring; expired in 2.3.0", "call"),
    Removed(".tostring", ".tobytes", "NumPy 2.3 (ndarray), Pillow 3.0 (Image)",
            "NumPy 1.19.0 release notes, Deprecations: ndarray.tostring; expired in 2.3.0", "call"),
    *(Removed(f"numpy.{old}", f"numpy.{new}", "NumPy 2.0", _NUMPY_2) for old, new in (
        ("int0", "intp"), ("uint0", "uintp"), ("bool8", "bool_"), ("float_", "float64"), ("complex_", "complex128"),
        ("cfloat", "complex128"), ("longfloat", "longdouble"), ("string_", "bytes_"), ("unicode_", "str_"),
        ("NaN", "nan"), ("Inf", "inf"), ("PINF", "inf"), ("infty", "inf"), ("round_", "round"),
        ("product", "prod"), ("cumproduct", "cumprod"), ("alltrue", "all"), ("sometrue", "any"),
        ("mat", "asmatrix"))),
    Removed("scipy.misc.imread", "imageio.v2.imread", "SciPy 1.3", _MISC, "one-argument",
            "scipy.misc.imread's flatten= and mode= are imageio.v2.imread(path, pilmode=...)'s; flatten=True was "
            "a float grey image: np.asarray(PIL.Image.open(path).convert('F'))"),
    Removed("scipy.misc.imsave", "imageio.v2.imwrite", "SciPy 1.3", _MISC, "name",
            "scipy.misc.imsave stretched an array that is not uint8 to 0..255; imageio.v2.imwrite writes the values "
            "as they are: convert a float image first, e.g. (image * 255).astype(np.uint8)"),
    Removed("scipy.misc.imresize", "", "SciPy 1.3", _MISC, "check",
            "scipy.misc.imresize returned uint8, stretched to 0..255: for a uint8 image and a (height, width) size, "
            "np.array(PIL.Image.fromarray(image).resize((width, height), PIL.Image.BILINEAR)); "
            "skimage.transform.resize returns floats in 0..1 (preserve_range=True keeps the scale)"),
    Removed("scipy.misc.toimage", "", "SciPy 1.3", _MISC, "check",
            "scipy.misc.toimage stretched an array that is not uint8 to 0..255: for a uint8 array, "
            "PIL.Image.fromarray(array)"),
    Removed("scipy.misc.bytescale", "", "SciPy 1.3", _MISC, "check",
            "scipy.misc.bytescale(a) stretched a to 0..255 uint8: "
            "((a - a.min()) * 255 / (a.max() - a.min())).round().astype(np.uint8)"),
    *(Removed(f"scipy.misc.{name}", f"scipy.special.{name}", "SciPy 1.3", _MISC)
      for name in ("logsumexp", "comb", "factorial")),
    *(Removed(f"scipy.ndimage.{sub}", "scipy.ndimage", "SciPy 2.0 (deprecated since 1.8)", _NDIMAGE)
      for sub in ("filters", "interpolation", "morphology", "measurements", "fourier")),
    Removed("skimage.io.imread(as_grey)", "as_gray", "scikit-image 0.16",
            "scikit-image 0.16 release notes, API changes (as_grey, deprecated in 0.14)", "keyword"),
    *(Removed(f"skimage.color.{old}", f"skimage.color.{new}", "scikit-image 0.19",
              "scikit-image 0.19 release notes, Completed deprecations") for old, new in (
        ("rgb2grey", "rgb2gray"), ("grey2rgb", "gray2rgb"))),
    *(Removed(f"skimage.measure.{old}", f"skimage.metrics.{new}", "scikit-image 0.18",
              "scikit-image 0.18 release notes, Completed deprecations") for old, new in (
        ("compare_ssim", "structural_similarity"), ("compare_psnr", "peak_signal_noise_ratio"),
        ("compare_mse", "mean_squared_error"))),
    *(Removed(f"PIL.Image.{old}", f"PIL.Image.{new}", "Pillow 10", "Pillow 10.0.0 release notes, Backwards "
              "incompatible changes: Constants (deprecated in 9.1.0)") for old, new in (
        ("ANTIALIAS", "LANCZOS"), ("LINEAR", "BILINEAR"), ("CUBIC", "BICUBIC"))),
)

BY_OLD = {row.old: row for row in REMOVED}
