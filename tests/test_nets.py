"""Generated nets and solvers: equal to Caffe's LeNet, built by the real engine, invalid values refused."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from caffetool.data import db, layout
from caffetool.data.registry import FASHION_MNIST
from caffetool.engine.locate import caffe_env
from caffetool.errors import CaffeRefused, ConfigError, NetError
from caffetool.nets import declaration, generate, prototxt, solvers

MODELS = declaration.discover()


@pytest.fixture(scope="module")
def fashion(tmp_path_factory):
    from caffetool.data import fetch

    data_dir = tmp_path_factory.mktemp("data")
    return fetch.fetch(FASHION_MNIST, data_dir, progress=False, say=lambda _: None).dataset


@pytest.fixture(scope="module")
def big_images(tmp_path_factory, caffe):
    """A tiny data set of 3x227x227 images, enough for the ImageNet models' crops."""
    root = tmp_path_factory.mktemp("big") / "big"
    root.mkdir()
    rng = np.random.default_rng(0)
    splits = {}
    for split in ("train", "test"):
        writer = db.Writer(root / f"{split}_lmdb", "lmdb")
        values = []
        for i in range(4):
            d = caffe.proto.caffe_pb2.Datum(channels=3, height=227, width=227, label=i % 10,
                                            data=rng.integers(0, 256, 3 * 227 * 227, dtype=np.uint8).tobytes())
            values.append(d.SerializeToString())
        writer.put_chunk(db.keys(0, 4), values)
        writer.close()
        splits[split] = {"db": f"{split}_lmdb", "count": 4, "shape": [3, 227, 227], "histogram": [1] * 4}
    manifest = {"dataset": "big", "backend": "lmdb", "classes": [str(i) for i in range(1000)], "splits": splits}
    (root / layout.MANIFEST).write_text(json.dumps(manifest))
    return layout.Dataset(root, manifest)


def reference(engine, name, message):
    return prototxt.read(engine.prefix / "share/caffe/examples/mnist" / name, message)


def test_lenet_equals_caffes_own_train_test_net(caffe, engine, fashion, tmp_path):
    out = generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "run", solvers.SolverOptions())
    ours = prototxt.read(out.files["train_val.prototxt"], caffe.proto.caffe_pb2.NetParameter())
    theirs = reference(engine, "lenet_train_test.prototxt", caffe.proto.caffe_pb2.NetParameter())
    for net in (ours, theirs):
        for layer in net.layer:
            layer.data_param.ClearField("source")
    assert ours == theirs


def test_lenet_solver_equals_caffes_recipe(caffe, engine, fashion, tmp_path):
    out = generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "run", solvers.SolverOptions())
    ours = prototxt.read(out.files["solver.prototxt"], caffe.proto.caffe_pb2.SolverParameter())
    theirs = reference(engine, "lenet_solver.prototxt", caffe.proto.caffe_pb2.SolverParameter())
    assert (ours.net, ours.snapshot_prefix, ours.solver_mode) == ("train_val.prototxt", "snapshots/lenet", ours.CPU)
    for s in (ours, theirs):
        for f in ("net", "snapshot_prefix", "solver_mode"):
            s.ClearField(f)
    assert ours == theirs


def test_caffe_train_accepts_the_generated_files(engine, fashion, tmp_path):
    out = generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "run",
                            solvers.SolverOptions(max_iter=20, test_interval=10, test_iter=2, display=10))
    done = subprocess.run([str(engine.caffe), "train", "-solver", "solver.prototxt"], cwd=out.out,
                          capture_output=True, text=True, env=caffe_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Optimization Done." in done.stderr
    assert (out.out / "snapshots" / "lenet_iter_20.caffemodel").exists()


def conv(out_c, in_c, k, group=1):
    return out_c * (in_c // group) * k * k + out_c


def fc(out_n, in_n):
    return out_n * in_n + out_n


def expected_params(name: str) -> int:
    """Hand count for 1,000 classes from each model's layer shapes."""
    if name in ("alexnet", "caffenet"):
        return (conv(96, 3, 11) + conv(256, 96, 5, 2) + conv(384, 256, 3) + conv(384, 384, 3, 2)
                + conv(256, 384, 3, 2) + fc(4096, 256 * 6 * 6) + fc(4096, 4096) + fc(1000, 4096))
    if name == "vgg16":
        widths = [3, 64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512]
        convs = sum(conv(o, i, 3) for i, o in zip(widths, widths[1:]))
        return convs + fc(4096, 512 * 7 * 7) + fc(4096, 4096) + fc(1000, 4096)
    if name == "googlenet":
        total = conv(64, 3, 7) + conv(64, 64, 1) + conv(192, 64, 3)
        channels = 192
        for one, r3, three, r5, five, proj in [
            (64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), (192, 96, 208, 16, 48, 64),
            (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
            (256, 160, 320, 32, 128, 128), (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]:
            total += (conv(one, channels, 1) + conv(r3, channels, 1) + conv(three, r3, 3)
                      + conv(r5, channels, 1) + conv(five, r5, 5) + conv(proj, channels, 1))
            channels = one + three + five + proj
        return total + fc(1000, channels)
    raise KeyError(name)


@pytest.mark.parametrize("name", ["lenet", "alexnet", "caffenet", "vgg16", "googlenet"])
def test_all_models_build_and_train_matches_deploy(caffe, engine, fashion, big_images, tmp_path, name):
    m = MODELS[name]
    data = fashion if name == "lenet" else big_images
    out = generate.generate(engine, m, data, tmp_path / name, solvers.SolverOptions(), batch=2, test_batch=2)
    report = out.report
    deploy = report["deploy"]["deploy.prototxt"]
    assert deploy["params"] == (431_080 if name == "lenet" else expected_params(name))
    # Every learnable layer of the deploy net has the same shapes in the train and test nets.
    for layer, shapes in deploy["param_shapes"].items():
        assert report["train"]["param_shapes"][layer] == shapes
        assert report["test"][0]["param_shapes"][layer] == shapes
    if name == "googlenet":  # auxiliary heads: TRAIN only
        assert "loss1/classifier" in report["train"]["param_shapes"]
        assert "loss1/classifier" not in report["test"][0]["param_shapes"]
        assert "loss1/classifier" not in deploy["param_shapes"]
    assert deploy["blobs"]["prob"] == [1, 1000 if name != "lenet" else 10]


@pytest.mark.parametrize("options,message", [
    (dict(lr_policy="cosine"), "unknown --lr-policy 'cosine'; choose one of: fixed, step, multistep, exp, inv, poly, sigmoid"),
    (dict(lr_policy="step"), "--lr-policy step needs --gamma and --stepsize"),
    (dict(lr_policy="step", gamma=0.1), "--lr-policy step needs --stepsize"),
    (dict(lr_policy="multistep", gamma=0.1), "--lr-policy multistep needs --stepvalue"),
    (dict(type="Adam", momentum=0.0), "--type Adam needs --momentum above 0 (Caffe's example uses 0.9)"),
    (dict(type="AdaGrad", momentum=0.9), "--type AdaGrad cannot use momentum (got --momentum 0.9)"),
    (dict(type="Momentum"), "unknown --type 'Momentum'; choose one of: SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam"),
    (dict(base_lr=0.0), "--base-lr must be a learning rate above 0, got 0.0"),
    (dict(mode="tpu"), "unknown --mode 'tpu'; choose one of: cpu, gpu"),
])
def test_invalid_solver_values_are_refused(options, message):
    with pytest.raises(ConfigError) as err:
        solvers.settle(solvers.SolverOptions(**options))
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("flags,message", [
    (dict(iter_size="0"), "--iter-size must be a number of batches from 1 to 2147483647, got 0"),
    (dict(momentum="-1"), "--momentum must be a decay factor from 0 to just below 1, got -1.0"),
    (dict(momentum="1"), "--momentum must be a decay factor from 0 to just below 1, got 1.0"),
    (dict(gamma="-5"), "--gamma must be an lr factor above 0, got -5.0"),
    (dict(weight_decay="-1"), "--weight-decay must be a penalty of 0 or more, got -1.0"),
    (dict(test_iter="0"), "--test-iter must be a number of batches from 1 to 2147483647, got 0"),
    (dict(lr_policy="step", gamma="0.1", stepsize="0"), "--stepsize must be an iteration count from 1 to 2147483647, got 0"),
    (dict(lr_policy="multistep", gamma="0.1", stepvalue=["0", "10"]), "--stepvalue must be an iteration from 1 to 2147483647, got 0"),
    (dict(max_iter=str(2**31)), "--max-iter must be an iteration count from 1 to 2147483647, got 2147483648"),
    (dict(type="adam", momentum2="1.5"), "--momentum2 must be a decay factor from 0 to just below 1, got 1.5"),
    (dict(type="rmsprop", rms_decay="-0.1"), "--rms-decay must be a decay factor from 0 to just below 1, got -0.1"),
    (dict(type="adam", delta="0"), "--delta must be a stability term above 0, got 0.0"),
    (dict(random_seed="-3"), "--random-seed must be a seed from 0 to 9223372036854775807, got -3"),
    (dict(base_lr="abc"), "--base-lr 'abc' is not a number"),
    (dict(max_iter="1.5"), "--max-iter '1.5' is not a whole number"),
    (dict(type="adm"), "unknown --type 'adm'; choose one of: SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam"),
])
def test_out_of_range_flags_are_refused_with_flag_value_and_range(flags, message):
    with pytest.raises(ConfigError) as err:
        solvers.SolverOptions.from_flags(**flags)
    assert str(err.value) == message


def test_flags_become_options_in_caffes_spelling():
    options = solvers.SolverOptions.from_flags(type="adam", lr_policy="Step", gamma="0.5", stepsize="100",
                                              iter_size="2", stepvalue=[], mode="GPU", max_iter=None)
    assert (options.type, options.lr_policy, options.mode, options.iter_size) == ("Adam", "step", "gpu", 2)
    assert (options.gamma, options.stepsize, options.max_iter) == (0.5, 100, None)
    assert solvers.SolverOptions.from_flags().iter_size == 1  # --iter-size absent: Caffe's default
    # sigmoid's gamma is a slope, so a negative one is meaningful there
    assert solvers.SolverOptions.from_flags(lr_policy="sigmoid", gamma="-0.01", stepsize="100").gamma == -0.01


@pytest.mark.parametrize("solver_type", list(solvers.SOLVER_TYPES))
@pytest.mark.parametrize("policy,extra", [("fixed", {}), ("step", dict(gamma=0.1, stepsize=100)),
                                          ("multistep", dict(gamma=0.1, stepvalue=[100, 200])),
                                          ("exp", dict(gamma=0.99)), ("inv", dict(gamma=1e-4, power=0.75)),
                                          ("poly", dict(power=2.0)), ("sigmoid", dict(gamma=-0.01, stepsize=100))])
def test_every_solver_type_and_policy_is_accepted_by_caffe(caffe, engine, fashion, tmp_path, solver_type, policy, extra):
    out = generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "run",
                            solvers.SolverOptions(type=solver_type, lr_policy=policy, iter_size=2, random_seed=7, **extra))
    text = out.files["solver.prototxt"].read_text()
    assert f'lr_policy: "{policy}"' in text
    assert ("type:" in text) == (solver_type != "SGD")
    assert "iter_size: 2" in text and "random_seed: 7" in text


def test_batch_size_zero_is_refused_and_nothing_written(engine, fashion, tmp_path):
    with pytest.raises(ConfigError, match="--batch-size must be at least 1, got 0"):
        generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "run", solvers.SolverOptions(), batch=0)
    assert not (tmp_path / "run").exists()


def test_existing_files_need_force(engine, fashion, tmp_path):
    generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "run", solvers.SolverOptions())
    with pytest.raises(ConfigError, match="already has train_val.prototxt, deploy.prototxt, solver.prototxt; use --force"):
        generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "run", solvers.SolverOptions())


def test_model_too_big_for_the_images_is_refused(engine, fashion, tmp_path):
    with pytest.raises(ConfigError, match="smaller than vgg16's 224x224 crop"):
        generate.generate(engine, MODELS["vgg16"], fashion, tmp_path / "run", solvers.SolverOptions())


def test_user_net_with_a_syntax_error_names_line_and_column(engine, fashion, tmp_path):
    bad = tmp_path / "mine.prototxt"
    bad.write_text('name: "x"\nlayer {\n  name: "a"\n  tpye: "Data"\n}\n')
    with pytest.raises(NetError) as err:
        generate.generate(engine, None, fashion, tmp_path / "run", solvers.SolverOptions(), net_file=bad)
    assert str(err.value).startswith(f"{bad}:4:3: ")
    assert "tpye" in str(err.value)


def test_user_net_is_validated_by_caffe(engine, fashion, tmp_path, caffe):
    good = generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "gen", solvers.SolverOptions())
    mine = tmp_path / "mine.prototxt"
    mine.write_text(good.files["train_val.prototxt"].read_text().replace("num_output: 50", "num_output: 0"))
    with pytest.raises(CaffeRefused, match=r"^Caffe refused the net \(base_conv_layer.cpp:\d+\): Check failed: num_output_ > 0"):
        generate.generate(engine, None, fashion, tmp_path / "run", solvers.SolverOptions(), net_file=mine)
    assert not (tmp_path / "run").exists()


def test_missing_dataset_is_refused_through_the_task(tmp_path):
    from .test_tasks_engine import invoke

    done = invoke("model.generate", "--model", "lenet", "--dataset", "mnist", "--data-dir", str(tmp_path),
                  "--out", str(tmp_path / "run"))
    assert done.returncode == 1
    assert done.stderr.strip() == f"Error: data set mnist not found in {tmp_path} — run `caffetool data.fetch --dataset mnist`"
    assert not (tmp_path / "run").exists()


@pytest.mark.engine
def test_model_list_shows_every_model():
    from .test_tasks_engine import invoke

    done = invoke("model.list")
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert lines["lenet"][1:4] == ["1x28x28", "431,080", "9"]
    assert lines["vgg16"][1:3] == ["3x224x224", f"{expected_params('vgg16'):,}"]


def test_a_broken_model_declaration_is_named(tmp_path):
    (tmp_path / "mine.py").write_text("MODEL = Model(\n")
    with pytest.raises(NetError, match=rf"^{tmp_path}/mine.py cannot be loaded: SyntaxError: "):
        declaration.discover(tmp_path)
    (tmp_path / "mine.py").write_text("MODEL = 5\n")
    with pytest.raises(NetError, match=rf"^{tmp_path}/mine.py defines no MODEL = Model\(...\)$"):
        declaration.discover(tmp_path)


GENERATED = ["deploy.prototxt", "snapshots", "solver.prototxt", "train_val.prototxt"]


def test_a_new_folder_appears_complete_and_leaves_no_staging(engine, fashion, tmp_path):
    generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "gen", solvers.SolverOptions())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen"]
    assert sorted(p.name for p in (tmp_path / "gen").iterdir()) == GENERATED


def test_a_file_as_out_is_refused_and_kept(engine, fashion, tmp_path):
    (tmp_path / "gen").write_text("mine")
    with pytest.raises(ConfigError, match=rf"^--out {tmp_path}/gen is a file; give a folder for the generated files$"):
        generate.generate(engine, MODELS["lenet"], fashion, tmp_path / "gen", solvers.SolverOptions())
    assert (tmp_path / "gen").read_text() == "mine"


def test_a_run_directory_keeps_what_else_it_holds(engine, fashion, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "labels.txt").write_text("0 zero\n")
    generate.generate(engine, MODELS["lenet"], fashion, run, solvers.SolverOptions())
    assert sorted(p.name for p in run.iterdir()) == sorted([*GENERATED, "labels.txt"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
