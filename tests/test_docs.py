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

from caffetool.demo import webapp
from caffetool.layers import catalogue
from caffetool.runs import folder
from caffetool.tasks import ns

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).parent / "mkdocs"
FRONT_PAGE_LINES = 150
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
CODE = re.compile(r"`([^`\n]+)`|^(?: {4,}|\t)(.+)$", re.M)  # inline code, and indented code blocks' lines


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
    http = (tmp_path / "site" / "reference" / "http" / "index.html").read_text()
    assert all(f"<code>{endpoint.path}</code>" in http for endpoint in webapp.ROUTES)
    assert all(f"<code>{kind.__name__}</code>" in http for kind, _ in webapp.STATUS)
    layers = (tmp_path / "site" / "reference" / "layers" / "index.html").read_text()
    assert all(f"<code>{name}</code>" in layers for name in catalogue.CATALOGUE)
    assert "no: runs Python code, which an ONNX model cannot hold" in layers


@pytest.mark.parametrize("link", ["no-such-page.md", "../explanation/engine.md#no-such-section"])
def test_a_broken_link_fails_the_build_naming_it(tmp_path, link):
    project = copy_of_the_docs(tmp_path)
    page = project / "docs" / "guides" / "data.md"
    page.write_text(page.read_text() + f"\nSee [the missing part]({link}).\n")
    done = build(project, tmp_path / "site")
    assert done.returncode == 1
    assert link.split("/")[-1] in done.stderr


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


def commands(text: str) -> list[tuple[str, str]]:
    """``(task, the rest)`` of every ``caffetool TASK ...`` written as code, continuation lines joined,
    up to a shell ``&&`` or comment."""
    found = []
    for inline, block in CODE.findall(re.sub(r"\\\n\s*", " ", text)):
        for match in re.finditer(r"(?:^|\s|&& )caffetool ([a-z][\w.-]*)(.*?)(?=&&|\s#\s|$)", inline or block):
            found.append((match.group(1), " ".join(match.group(2).split())))
    return found


def flags_of(task_name: str) -> set[str]:
    """The long options ``caffetool TASK`` accepts, as Invoke parses them (``--no-X`` for a flag on
    by default)."""
    task, _ = ns.task_with_config(task_name)
    flags = {"--help"}
    for a in task.get_arguments():
        flags |= {f"--{name}" for name in a.names if len(name) > 1}
        if a.kind is bool and a.default is True:
            flags.add(f"--no-{a.name.replace('_', '-')}")
    return flags


def test_commands_are_found_in_code_and_continued_lines():
    text = ("Run `caffetool train --max-iter 2000` or\n\n    caffetool evaluate RUN \\\n        --top 3  # a comment --x\n\n"
            "caffetool builds it (prose), `caffetool a && caffetool b --c`.")
    assert commands(text) == [("train", "--max-iter 2000"), ("evaluate", "RUN --top 3"), ("a", ""), ("b", "--c")]


@pytest.mark.parametrize("page", [str(p.relative_to(ROOT)) for p in PAGES])
def test_every_option_a_page_shows_is_one_its_task_takes(page):
    """The example commands of the README and the site: each task exists and takes each ``--option``
    shown (values in quotes, such as ``--args "--gpu all"``, are another program's)."""
    wrong = []
    for task, rest in commands((ROOT / page).read_text()):
        if task == "TASK":
            continue
        if task not in ns.task_names and not any(task in aliases for aliases in ns.task_names.values()):
            wrong.append(f"caffetool {task}: no such task")
            continue
        shown = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", re.sub(r'"[^"]*"', "", rest)))
        wrong += [f"caffetool {task} {flag}" for flag in sorted(shown - flags_of(task))]
    assert not wrong, wrong


def test_a_page_names_another_section_by_a_link_not_by_its_title():
    """A heading quoted in the text ("see "Every CPU core"") is a link, which the strict build checks."""
    headings = {h for p in [*PAGES, ROOT / "benchmarks" / "RESULTS.md"]
                for h in re.findall(r"^#{2,6} (.+)$", p.read_text(), re.M)}
    quoted = [(str(p.relative_to(ROOT)), title) for p in PAGES
              for title in re.findall(r'(?<![\[(])"([^"]{4,80})"(?!\])', re.sub(r"\s*\n\s*", " ", p.read_text()))
              if title in headings or len(title) >= 12 and any(h.startswith(title) for h in headings)]
    assert not quoted, quoted


INDEX_INSTALL = re.compile(r"pip3? install(?: -\S+)* ['\"]?caffetool(?:\[[\w,]+\])?['\"]?(?![\w./-])")


def test_nothing_tells_a_user_to_install_caffetool_from_a_package_index():
    """No package index publishes caffetool: a ``pip install caffetool`` would fail, or install someone
    else's code under that name. Pages and messages name the checkout or the wheel instead."""
    assert INDEX_INSTALL.search("run pip install 'caffetool[sweep]' first") and INDEX_INSTALL.search("pip install caffetool")
    assert not INDEX_INSTALL.search("pip install 'dist/caffetool-0.1.0-py3-none-any.whl[sweep]'")
    assert not INDEX_INSTALL.search("pip install -e '/home/you/caffetool[sweep]'")
    texts = [*PAGES, ROOT / "benchmarks" / "RESULTS.md", *(ROOT / "caffetool").rglob("*.py"), *(ROOT / "docker").rglob("*")]
    found = [(str(p.relative_to(ROOT)), m.group(0)) for p in texts if p.is_file() and p.suffix != ".pyc"
             for m in INDEX_INSTALL.finditer(p.read_text(errors="replace"))]
    assert not found, found
