"""caffetool's settings: the declared kinds cover every default, and a project file or a merged value
of the wrong kind is refused with the file (or variable), the key and what it should hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from caffetool.errors import ConfigError
from caffetool.tasks import settings


def test_every_default_has_a_declared_kind_and_passes_its_own_check():
    assert {s: set(keys) for s, keys in settings.SETTINGS.items()} == {
        s: set(keys) for s, keys in settings.TASK_DEFAULTS.items()}
    settings.check_settings(settings.TASK_DEFAULTS, lambda key: "defaults")


def test_sections_that_are_not_caffetools_are_left_to_invoke():
    settings.check_settings({"run": {"echo": True}, "tasks": 5, "data": {"dir": "d"}}, lambda key: "x")


@pytest.mark.parametrize("tree,message", [
    ({"engine": {"jobs": "4"}}, None),
    ({"engine": {"jobs": 4, "prefix": None}}, None),
    ({"engine": {"jobs": 2.5}}, "f: engine.jobs: 2.5 is not a whole number"),
    ({"engine": {"jobs": 5000}}, "f: engine.jobs: must be a number of compile jobs from 1 to 4096, got 5000"),
    ({"engine": {"jobs": True}}, "f: engine.jobs: True is not a number"),
    ({"runs": {"dir": 1.5}}, "f: runs.dir: must be text (a folder), got 1.5"),
    ({"engine": {"source": ["a"]}}, "f: engine.source: must be text (a folder or URL), got ['a']"),
    ({"model": "models"}, "f: model: must be a mapping of settings (dir), got 'models'"),
    ({"data": {"dataset": "MNIST"}}, None),
    ({"data": {"dataset": "cifar"}}, "f: unknown data.dataset 'cifar'; choose one of: mnist, fashion-mnist"),
])
def test_values_are_checked_by_kind(tree, message):
    if message is None:
        settings.check_settings(tree, lambda key: "f")
        return
    with pytest.raises(ConfigError) as err:
        settings.check_settings(tree, lambda key: "f")
    assert str(err.value) == message


def test_a_json_project_file_is_read_as_invoke_reads_it(tmp_path: Path):
    (tmp_path / "invoke.json").write_text('{"data": {"dir": "d"},}')
    with pytest.raises(ConfigError) as err:
        settings.check_config_file(tmp_path / "invoke", "")
    assert str(err.value) == (f"invoke.json: line 1, column 23: Expecting property name enclosed in double quotes; "
                              f"fix {tmp_path / 'invoke.json'}")


def test_invoke_yaml_wins_over_yml_as_in_invoke(tmp_path: Path):
    (tmp_path / "invoke.yaml").write_text("data: {dir: d}\n")
    (tmp_path / "invoke.yml").write_text("data: 5\n")  # never read: Invoke stops at the first it finds
    settings.check_config_file(tmp_path / "invoke", "")


def test_no_project_file_and_an_empty_one_are_fine(tmp_path: Path):
    settings.check_config_file(tmp_path / "invoke", "")
    (tmp_path / "invoke.yaml").write_text("# nothing set\n")
    settings.check_config_file(tmp_path / "invoke", "")


def test_a_folder_named_invoke_yaml_is_refused(tmp_path: Path):
    (tmp_path / "invoke.yaml").mkdir()
    with pytest.raises(ConfigError, match=rf"^cannot read {tmp_path / 'invoke.yaml'}: Is a directory; fix or remove it$"):
        settings.check_config_file(tmp_path / "invoke", "")


def test_a_merged_value_is_traced_to_its_variable(monkeypatch):
    monkeypatch.setenv("INVOKE_ENGINE_DEBIAN_MIRROR", "x")
    assert settings.environment_origin("engine.debian_mirror") == "INVOKE_ENGINE_DEBIAN_MIRROR"
    monkeypatch.delenv("INVOKE_DATA_DIR", raising=False)
    assert settings.environment_origin("data.dir") == "invoke configuration"
