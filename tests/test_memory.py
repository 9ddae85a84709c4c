"""The memory estimator: counts derived by hand, Caffe's allocation rules one by one, and the real
engine's allocations."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest
from google.protobuf import text_format

from caffetool.errors import ConfigError
from caffetool.memory import estimator, fitting, measuring, netsource, table

from .test_nets import expected_params
from .test_tasks_engine import invoke


def parse(caffe, text):
    return text_format.Parse(text, caffe.proto.caffe_pb2.NetParameter())


def rules_total(e: estimator.Estimate) -> int:
    """Bytes by Caffe's rules, without malloc's rounding (which depends on every size)."""
    return sum(e.groups.values())


SMALL = """name: "small"
layer {{ name: "in" type: "Input" top: "data" top: "label" input_param {{ shape {{ dim: 8 dim: 3 dim: 10 dim: 10 }} shape {{ dim: 8 }} }} }}
layer {{ name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param {{ num_output: 4 kernel_size: {k} pad: {pad} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "conv" top: "ip1" inner_product_param {{ num_output: 6 }} }}
layer {{ name: "relu" type: "ReLU" bottom: "ip1" top: "{relu_top}" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "{relu_top}" top: "ip2" inner_product_param {{ num_output: 5 }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }}
{extra}"""


def small(caffe, k=3, pad=1, relu_top="ip1", extra=""):
    return parse(caffe, SMALL.format(k=k, pad=pad, relu_top=relu_top, extra=extra))


def test_in_place_relu_saves_exactly_one_blob(caffe):
    inplace = estimator.estimate(small(caffe), estimator.Options(test_net=False))
    separate = estimator.estimate(small(caffe, relu_top="relu"), estimator.Options(test_net=False))
    blob = 8 * 6 * 4
    assert rules_total(separate) - rules_total(inplace) == 2 * blob  # the ReLU's own data and gradient


def test_a_blob_feeding_two_layers_gets_a_split_with_its_own_gradients(caffe):
    extra = ('layer { name: "ip3" type: "InnerProduct" bottom: "ip1" top: "ip3" inner_product_param { num_output: 5 } }\n'
             'layer { name: "loss2" type: "SoftmaxWithLoss" bottom: "ip3" bottom: "label" top: "loss2" }')
    e = estimator.estimate(small(caffe, extra=extra), estimator.Options(test_net=False))
    splits = {r.layer: r for r in e.rows if r.type == "Split"}
    ip1 = splits["ip1_relu_0_split"]  # Caffe's name: blob, the layer that last wrote it, top index
    assert ip1.data_bytes == 0 and ip1.diff_bytes == 2 * 8 * 6 * 4  # shared data, one gradient per reader
    assert splits["label_in_1_split"].diff_bytes == 0  # labels get no gradient


@pytest.mark.parametrize("tuned", [False, True])
def test_1x1_convolution_needs_no_im2col(caffe, tuned):
    """BVLC's engine keeps one image's columns; the OpenMP engine a chunk of images' columns and outputs."""
    options = estimator.Options(test_net=False, tuned=tuned)
    three = estimator.estimate(small(caffe, k=3, pad=1), options)
    one = estimator.estimate(small(caffe, k=1, pad=0), options)
    conv3 = next(r for r in three.rows if r.layer == "conv")
    conv1 = next(r for r in one.rows if r.layer == "conv")
    bias_multiplier = 10 * 10 * 4
    columns, outputs = 3 * 3 * 3 * 10 * 10, 4 * 10 * 10  # C x k x k x Ho x Wo, and one image's top
    chunk = 8 * (columns + outputs) if tuned else columns  # the whole batch of 8 in one chunk
    assert conv3.scratch_bytes - bias_multiplier == chunk * 4
    assert conv1.scratch_bytes == bias_multiplier


@pytest.mark.parametrize("mode,solver,copies", [
    ("cpu", "SGD", 1), ("cpu", "Nesterov", 2), ("cpu", "AdaGrad", 2), ("cpu", "RMSProp", 2), ("cpu", "AdaDelta", 4),
    ("cpu", "Adam", 3),
    # the *_update_gpu kernels update in place: history blobs only
    ("gpu", "SGD", 1), ("gpu", "Nesterov", 1), ("gpu", "AdaGrad", 1), ("gpu", "RMSProp", 1), ("gpu", "AdaDelta", 2),
    ("gpu", "Adam", 2)])
def test_solver_state_per_parameter(caffe, mode, solver, copies):
    net = small(caffe)
    base = estimator.estimate(net, estimator.Options(solver="SGD", mode=mode))
    other = estimator.estimate(net, estimator.Options(solver=solver, mode=mode))
    param_bytes = sum(r.param_bytes for r in base.rows)
    assert sum(r.history_bytes for r in other.rows) == copies * param_bytes
    assert rules_total(other) - rules_total(base) == (copies - 1) * param_bytes


def test_inference_has_no_gradients_or_history(caffe):
    e = estimator.estimate(small(caffe), estimator.Options(phase="test"))
    assert e.groups["gradient maps"] == 1 * 4  # only the loss's own weight
    assert all(r.grad_bytes == 0 and r.history_bytes == 0 for r in e.rows)


def conv_macc(out_c, in_c, k, size, group=1):
    return out_c * size * size * (in_c // group) * k * k


def expected_macc(name: str) -> int:
    if name == "lenet":
        return conv_macc(20, 1, 5, 24) + conv_macc(50, 20, 5, 8) + 800 * 500 + 500 * 10
    if name == "caffenet":
        return (conv_macc(96, 3, 11, 55) + conv_macc(256, 96, 5, 27, 2) + conv_macc(384, 256, 3, 13)
                + conv_macc(384, 384, 3, 13, 2) + conv_macc(256, 384, 3, 13, 2)
                + 9216 * 4096 + 4096 * 4096 + 4096 * 1000)
    widths = [3, 64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512]
    sizes = [224, 224, 112, 112, 56, 56, 56, 28, 28, 28, 14, 14, 14]
    return (sum(conv_macc(o, i, 3, s) for i, o, s in zip(widths, widths[1:], sizes))
            + 25088 * 4096 + 4096 * 4096 + 4096 * 1000)


@pytest.mark.parametrize("name", ["lenet", "caffenet", "vgg16"])
def test_parameters_and_maccs_match_the_layer_definitions(caffe, name):
    source = netsource.load(caffe, name, None, None, None, batch=1, test_batch=1)
    e = estimator.estimate(source.net, estimator.Options(input_shape=source.input_shape))
    assert e.params == (431_080 if name == "lenet" else expected_params(name))
    learned = sum(r.macc for r in e.rows if r.type in ("Convolution", "InnerProduct"))
    assert learned == expected_macc(name)


def test_estimate_matches_what_caffe_allocates_for_lenet(caffe, engine):
    source = netsource.load(caffe, "lenet", None, None, None, batch=64)
    e = estimator.estimate(source.net, estimator.Options(input_shape=source.input_shape))
    got = measuring.measure(engine, caffe, source.net, "SGD", source.input_shape, 10)
    assert abs(e.total - got["allocated"]) / got["allocated"] <= 0.02


@pytest.mark.parametrize("mode,tuned", [("gpu", True), ("cpu", False), ("cpu", True)])
def test_per_sample_and_fixed_parts_add_up(caffe, mode, tuned):
    """Memory grows linearly with the batch; on the OpenMP engine's CPU the convolutions' scratch stops
    growing at 8 MiB a thread, so there the line is an upper bound; on a GPU the line leaves out CUDA's
    2 MiB pages, a step function of the batch."""
    source = netsource.load(caffe, "lenet", None, None, None, batch=64)
    options = estimator.Options(input_shape=source.input_shape, mode=mode, tuned=tuned)
    fixed, per = estimator.per_sample(source.net, options)
    for batch in (10, 100):
        e = estimator.estimate(source.net, replace(options, batch=batch))
        total = e.total - e.allocator if mode == "gpu" else e.total  # what per_sample splits: not CUDA's pages
        if mode == "cpu" and tuned and batch == 100:  # LeNet's conv2 chunks: 59 images at most
            assert total < fixed + batch * per < 1.3 * total
        else:
            assert abs(total - (fixed + batch * per)) / total < 0.01


def test_an_unknown_layer_is_named_and_the_total_becomes_a_lower_bound(caffe, tmp_path):
    text = SMALL.format(k=3, pad=1, relu_top="relu", extra="").replace('type: "ReLU"', 'type: "Frobnicate"')
    e = estimator.estimate(parse(caffe, text), estimator.Options(test_net=False))
    assert e.lower_bound and e.unmodelled == [("relu", "Frobnicate", "tops shaped like its first input, 8x6")]
    known = estimator.estimate(small(caffe, relu_top="relu"), estimator.Options(test_net=False))
    assert rules_total(e) == rules_total(known)  # its top and gradient still count; a ReLU owns nothing else
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    done = invoke("memory.estimate", "--net", str(path))
    assert done.returncode == 0, done.stderr
    assert "not modelled: layer 'relu' (Frobnicate): its own memory is not counted" in done.stdout
    assert re.search(r"^  total +at least [\d.]+ MiB", done.stdout, re.M)
    report = json.loads(invoke("memory.estimate", "--net", str(path), "--json").stdout)
    assert report["lower_bound"] and report["unmodelled"][0]["type"] == "Frobnicate"


def test_fit_and_the_gpu_preflight_say_a_lower_bound_is_one(caffe, tmp_path):
    from caffetool.train import preflight

    text = SMALL.format(k=3, pad=1, relu_top="relu", extra="").replace('type: "ReLU"', 'type: "Frobnicate"')
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    done = invoke("memory.fit", "--net", str(path), "--gpu-memory", "2GiB")
    assert done.returncode == 0, done.stderr
    assert ("  not modelled, so every figure above is a lower bound (the largest batch an upper limit): "
            "relu (Frobnicate)") in done.stdout
    said = []
    need = preflight.check(parse(caffe, text), estimator.Options(), [2**34], say=said.append)
    assert said == [f"memory check: at least {need / 2**30:.2f} GiB per GPU; not counted: relu (Frobnicate)"]
    with pytest.raises(ConfigError, match=r"^this run needs at least 1\.\d\d GiB per GPU, more than the 0\.61 GiB"):
        preflight.check(parse(caffe, text), estimator.Options(batch=200000), [2**30], say=said.append)


PYTHON_SOURCE = """layer { name: "src" type: "Python" top: "data" top: "label" python_param { module: "m" layer: "L" } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 5 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }"""


def test_a_source_of_unknown_shape_with_nothing_shaped_after_it_is_refused(caffe, tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(PYTHON_SOURCE)
    done = invoke("memory.estimate", "--net", str(path))
    assert done.returncode == 1 and done.stderr.strip() == (
        f"Error: {path}:1: layer 'src' makes blobs of unknown shape and every later layer reads them, so nothing "
        "can be estimated; declare its tops with an Input or DummyData layer of the same shapes in a copy of the net")


def test_layers_after_an_unshaped_blob_are_listed_and_the_rest_estimated(caffe):
    text = (PYTHON_SOURCE.replace('top: "label" ', "").replace('bottom: "label" ', "")
            + '\nlayer { name: "in" type: "Input" top: "x" top: "label" input_param { shape { dim: 4 dim: 10 } '
              'shape { dim: 4 } } }\nlayer { name: "ip2" type: "InnerProduct" bottom: "x" top: "ip2" '
              'inner_product_param { num_output: 3 } }\nlayer { name: "loss2" type: "SoftmaxWithLoss" bottom: "ip2" '
              'bottom: "label" top: "loss2" }')
    e = estimator.estimate(parse(caffe, text), estimator.Options(test_net=False))
    assert e.lower_bound
    unmodelled = [(name, kind) for name, kind, _ in e.unmodelled]
    assert unmodelled == [("src", "Python"), ("ip", "InnerProduct"), ("loss", "SoftmaxWithLoss")]
    assert e.params == 3 * 10 + 3


@pytest.mark.engine
def test_malformed_prototxt_names_line_and_column(tmp_path):
    path = tmp_path / "bad.prototxt"
    path.write_text('name: "x"\nlayer {\n  name: "a"\n  type: "Input"\n  bottom "y"\n}\n')
    done = invoke("memory.estimate", "--net", str(path))
    assert done.returncode == 1 and re.match(rf"Error: {re.escape(str(path))}:5:\d+: ", done.stderr)


@pytest.mark.engine
def test_estimate_task_prints_the_groups_and_json(tmp_path):
    done = invoke("memory.estimate", "--model", "lenet", "--batch-size", "64")
    assert done.returncode == 0, done.stderr
    for group in ("model", "feature maps", "gradient maps", "workspace", "total"):
        assert re.search(rf"^  {group} +[\d,.]+ MiB", done.stdout, re.M)
    assert "per sample" in done.stdout
    report = json.loads(invoke("memory.estimate", "--model", "vgg16", "--batch-size", "4", "--mode", "gpu",
                               "--cudnn", "--json").stdout)
    assert report["params"] == expected_params("vgg16") and report["flops"] == 2 * report["macc"]
    assert report["host_pinned"] > 0  # prefetch batches sit in pinned host memory on GPUs
    plot = tmp_path / "mem.png"
    assert invoke("memory.estimate", "--model", "lenet", "--plot", str(plot)).returncode == 0
    assert plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.engine
def test_fit_answers_for_vgg16_on_a_12gb_card():
    done = invoke("memory.fit", "--model", "vgg16", "--gpu-memory", "12GiB", "--batch-size", "128")
    assert done.returncode == 0, done.stderr
    largest = int(re.search(r"largest batch that fits: (\d+)", done.stdout).group(1))
    assert 1 <= largest < 128
    assert "does not fit" in done.stdout and "iter_size" in done.stdout and "fp16" in done.stdout
    # the split keeps batch x iter_size at the asked 128 (51 x 3 = 153 would change the recipe)
    assert "batch 32 with iter_size 4 (32 x 4 = 128, the same effective batch)" in done.stdout
    assert "153" not in done.stdout
    named = invoke("memory.fit", "--model", "vgg16", "--gpu", "K40", "--batch-size", "8")
    assert "batch 8 needs" in named.stdout and ": fits" in named.stdout


def test_fit_refuses_an_unknown_card():
    done = invoke("memory.fit", "--model", "lenet", "--gpu", "Voodoo2")
    assert done.returncode == 1 and done.stderr.startswith("Error: unknown --gpu 'Voodoo2'; choose one of: GTX 980")


@pytest.mark.engine
def test_report_reproduces_the_published_rule_of_thumb_and_names_its_sources():
    done = invoke("memory.report")
    assert done.returncode == 0, done.stderr
    assert 'published: 752,877,568 parameters (T. Dettmers, "Deep learning with GPUs", 2014)' in done.stdout
    assert "ours:      752,877,568 (weights + gradients)" in done.stdout
    assert "VGG-16, batch 256, training" in done.stdout
    assert 'published: about 28 GB (M. Rhu et al., "vDNN", MICRO 2016)' in done.stdout
    assert "seed" not in done.stdout.lower()


def test_invalid_options_are_refused(caffe):
    with pytest.raises(ConfigError, match="unknown --type 'Lion'"):
        estimator.estimate(small(caffe), estimator.Options(solver="Lion"))
    with pytest.raises(ConfigError, match="--batch-size must be at least 1, got 0"):
        estimator.estimate(small(caffe), estimator.Options(batch=0))


def test_gpu_preflight_refuses_a_run_that_cannot_fit(caffe):
    from caffetool.train import preflight

    source = netsource.load(caffe, "vgg16", None, None, None, batch=64)
    options = estimator.Options(input_shape=source.input_shape)
    twelve = 12 * 2**30  # card sizes are data here: these machines have no GPU to ask
    with pytest.raises(ConfigError, match=r"needs about [\d.]+ GiB per GPU.*the largest batch that fits is \d+"):
        preflight.check(source.net, options, [twelve, twelve])
    small_batch = netsource.load(caffe, "vgg16", None, None, None, batch=4)
    assert preflight.check(small_batch.net, options, [twelve]) < twelve
    assert preflight.check(source.net, options, []) is None


INPUT_ONLY = 'layer {{ name: "in" type: "Input" top: "x" input_param {{ shape {{ dim: {n} dim: 1073741824 }} }} }}'


def caffe_builds(engine, path) -> subprocess.CompletedProcess:
    """pycaffe builds the net in a child: Caffe aborts the whole process on a blob it refuses."""
    env = {**os.environ, "GLOG_minloglevel": "0", "GLOG_logtostderr": "1", "PYTHONPATH": str(engine.python_path)}
    return subprocess.run([sys.executable, "-c", f"import caffe; caffe.Net({str(path)!r}, caffe.TEST)"],
                          capture_output=True, text=True, env=env)


def test_a_blob_past_int_max_is_refused_where_caffe_refuses_it(caffe, engine, tmp_path):
    """2 x 2**30 elements is one past INT_MAX: Caffe aborts, the estimator refuses; 1 x 2**30 both build."""
    for n in (1, 2):
        (tmp_path / f"{n}.prototxt").write_text(INPUT_ONLY.format(n=n))
    assert caffe_builds(engine, tmp_path / "1.prototxt").returncode == 0
    refused = caffe_builds(engine, tmp_path / "2.prototxt")
    assert refused.returncode != 0 and "blob size exceeds INT_MAX" in refused.stderr
    estimator.estimate(parse(caffe, INPUT_ONLY.format(n=1)), estimator.Options(phase="test"))
    with pytest.raises(ConfigError) as err:
        estimator.estimate(parse(caffe, INPUT_ONLY.format(n=2)), estimator.Options(phase="test"), source="in.prototxt")
    assert str(err.value) == ("in.prototxt: blob 'x' would hold 2x1073741824 = 2,147,483,648 elements at batch 2, "
                              "more than the 2,147,483,647 (INT_MAX) a Caffe blob can hold; the largest batch "
                              "within that limit is 1 (--batch-size 1)")


@pytest.mark.engine
def test_estimate_task_refuses_a_batch_caffe_cannot_build():
    done = invoke("memory.estimate", "--model", "vgg16", "--batch-size", "1000")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "Error: model vgg16: blob 'conv1_1' would hold 1000x64x224x224 = 3,211,264,000 elements at batch 1000, "
        "more than the 2,147,483,647 (INT_MAX) a Caffe blob can hold; the largest batch within that limit is 668 "
        "(--batch-size 668)")
    assert invoke("memory.estimate", "--model", "vgg16", "--batch-size", "668").returncode == 0


@pytest.mark.parametrize("flags,message", [
    (["--gpu-memory", "0"], "Error: --gpu-memory must be more than 0 bytes: give the card's memory, e.g. 12GiB"),
    (["--gpu-memory", "1B"], "Error: --reserve 400.0 MiB leaves nothing of the card's 1 byte (--gpu-memory); "
                             "give the card's real size (e.g. 12GiB) or a smaller --reserve"),
    (["--gpu-memory", "12GiB", "--reserve", "20GiB"],
     "Error: --reserve 20,480.0 MiB leaves nothing of the card's 12,288.0 MiB (--gpu-memory); "
     "give the card's real size (e.g. 12GiB) or a smaller --reserve"),
])
def test_fit_refuses_a_card_with_no_memory_left(flags, message):
    done = invoke("memory.fit", "--model", "lenet", *flags)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == message


@pytest.mark.parametrize("batch,largest,split", [(128, 51, (32, 4)), (128, 200, (128, 1)), (96, 40, (32, 3)),
                                                 (127, 51, (1, 127)), (100, 30, (25, 4))])
def test_the_batch_is_split_exactly(batch, largest, split):
    part, k = fitting.exact_split(batch, largest)
    assert (part, k) == split and part * k == batch and part <= largest


def test_fit_keeps_an_asked_iter_size_in_the_effective_batch(caffe):
    source = netsource.load(caffe, "vgg16", None, None, None, batch=64)
    options = estimator.Options(input_shape=source.input_shape, iter_size=2)
    f = fitting.fit(source.net, options, 12 * 2**30, 400 * 2**20)
    split = next(c for c in f.changes if "iter_size" in c.name)
    assert split.name == "batch 32 with iter_size 4 (32 x 4 = 128, the same effective batch)" and split.fits
    assert "instead of 2" in split.cost


def test_the_largest_batch_stops_at_caffes_blob_limit(caffe):
    source = netsource.load(caffe, "lenet", None, None, None, batch=64)
    options = estimator.Options(input_shape=source.input_shape)
    f = fitting.fit(source.net, options, 80 * 2**30, 400 * 2**20)
    assert f.largest_batch == (2**31 - 1) // (20 * 24 * 24) == f.blob_limit_batch  # conv1's top per sample
    assert f.limited_by_blobs
    lines = table.fit_lines("lenet", "H100", options, f)
    assert lines[1] == ("  largest batch that fits: 186413 (Caffe's limit of INT_MAX elements per blob; "
                        "the memory would hold more)")


def test_fit_says_when_no_batch_fits(caffe):
    source = netsource.load(caffe, "vgg16", None, None, None, batch=64)
    options = estimator.Options(input_shape=source.input_shape)
    f = fitting.fit(source.net, options, 300 * 2**20, 0)
    assert f.largest_batch == 0 and not any("iter_size" in c.name for c in f.changes)
    assert table.fit_lines("vgg16", "300MiB", options, f)[1] == (
        "  no batch fits: even batch 1 needs more than the 300.0 MiB available")


def test_a_measurement_past_the_memory_available_is_refused_with_the_batch_that_fits(caffe):
    source = netsource.load(caffe, "lenet", None, None, None, batch=64)
    options = estimator.Options(input_shape=source.input_shape, batch=64)
    measuring.check_room(source.net, estimator.estimate(source.net, options), available=2**30)  # 64.5 MiB: room
    big = replace(options, batch=10_000)
    source = netsource.load(caffe, "lenet", None, None, None, batch=10_000)
    e = estimator.estimate(source.net, big)
    with pytest.raises(ConfigError) as refused:
        measuring.check_room(source.net, e, available=2**30)
    fits = int(re.search(r"--batch-size (\d+) or less", str(refused.value)).group(1))
    assert str(refused.value) == (f"measuring batch 10000 needs about {e.total / 2**30:,.1f} GiB by the estimate, "
                                  "and this machine has 1.0 GiB available (0.8 GiB, 80% of it, to give a "
                                  f"measurement): measure with --batch-size {fits} or less (nothing was run)")
    budget = int(0.8 * 2**30)  # the largest batch within it, not merely one that fits
    assert estimator.estimate(source.net, replace(big, batch=fits)).total <= budget
    assert estimator.estimate(source.net, replace(big, batch=fits + 1)).total > budget
    measuring.check_room(source.net, replace(e, options=replace(big, mode="gpu")), available=2**30)  # the card's


def test_memory_measure_refuses_a_batch_past_any_machines_memory_before_caffe_runs(tmp_path):
    """100 ReLUs of a megapixel each: 771 MiB a sample, 1.5 TiB at batch 2,000 (every blob within
    Caffe's limit, so only the memory can refuse it)."""
    layers = ['layer { name: "in" type: "Input" top: "data" top: "label" input_param { shape { dim: 1 dim: 1 '
              'dim: 1000 dim: 1000 } shape { dim: 1 } } }']
    for i in range(100):
        layers.append(f'layer {{ name: "r{i}" type: "ReLU" bottom: "{"data" if i == 0 else f"r{i - 1}"}" top: "r{i}" }}')
    layers += ['layer { name: "ip" type: "InnerProduct" bottom: "r99" top: "ip" inner_product_param { num_output: 2 } }',
               'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }']
    net = tmp_path / "wide.prototxt"
    net.write_text("\n".join(layers))
    done = invoke("memory.measure", "--net", str(net), "--batch-size", "2000")
    assert done.returncode == 1, done
    assert re.fullmatch(r"Error: measuring batch 2000 needs about 1,505\.0 GiB by the estimate, and this machine has "
                        r"[\d,.]+ GiB available \([\d,.]+ GiB, 80% of it, to give a measurement\): measure with "
                        r"--batch-size \d+ or less \(nothing was run\)\n", done.stderr), done.stderr
    assert "Check failed" not in done.stdout + done.stderr and done.stdout == ""
