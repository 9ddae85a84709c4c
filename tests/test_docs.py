"""The documentation: the site builds with MkDocs in strict mode (every page in the navigation,
every link resolving, the generated reference pages written from the code), a broken link fails
that build, and the README is a short front page whose links and task names are real."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from caffetool.runs import folder
from caffetool.tasks import ns

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).parent / "mkdocs"
FRONT_PAGE_LINES = 150


def build(project: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(site)], cwd=project,
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                                            "PATH": "/usr/bin:/bin"})


def copy_of_the_docs(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project)
    (project / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "RESULTS.md", project / "benchmarks")
    return project


def test_the_site_builds_in_strict_mode_with_every_task_and_setting(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages  # every page is in the navigation, and only pages that exist
    for page in nav:
        assert (tmp_path / "site" / page.removesuffix(".md").removesuffix("index") / "index.html").is_file(), page
    options = (tmp_path / "site" / "reference" / "options" / "index.html").read_text()
    assert options.count("<h2") == len(ns.task_names)
    assert "--to" in options and "pytorch" in options
    settings = (tmp_path / "site" / "reference" / "settings" / "index.html").read_text()
    assert "engine.prefix" in settings and "tracking.uri" in settings
    assert set(folder.CONTENTS) == set(folder.NAMES)  # every entry of a run's folder described
    run_folder = (tmp_path / "site" / "reference" / "run-folder" / "index.html").read_text()
    assert all(name in run_folder for name in folder.NAMES.values())


def test_a_broken_link_fails_the_build_naming_it(tmp_path):
    project = copy_of_the_docs(tmp_path)
    page = project / "docs" / "guides" / "data.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    done = build(project, tmp_path / "site")
    assert done.returncode == 1
    assert "no-such-page.md" in done.stderr


def test_the_readme_is_a_short_front_page_whose_links_and_tasks_are_real():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= FRONT_PAGE_LINES
    assert "./bootstrap quickstart" in text and "./bootstrap test" in text
    links = re.findall(r"\]\(([^)#]+)\)", text)
    local = [link for link in links if not link.startswith("http")]
    assert local and all((ROOT / link).is_file() for link in local), [link for link in local if not (ROOT / link).is_file()]
    tasks = {name for name in ns.task_names} | {alias for aliases in ns.task_names.values() for alias in aliases}
    named = set(re.findall(r"`caffetool (\w[\w.-]*)", text)) - {"TASK"}
    assert named and named <= tasks, named - tasks


@pytest.mark.parametrize("page", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")))
def test_the_tasks_a_page_names_exist(page):
    tasks = {name for name in ns.task_names} | {alias for aliases in ns.task_names.values() for alias in aliases}
    named = set(re.findall(r"`caffetool ([a-z][\w.-]*)", (ROOT / page).read_text()))
    assert named <= tasks | {"TASK"}, named - tasks
