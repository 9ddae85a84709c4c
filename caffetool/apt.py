"""apt, used two ways: installing system packages, and fetching a pinned Debian source package.

A source package is declared here as data (:class:`SourcePackage`, its :class:`Tarball` files
pinned by sha256 and size); the engine recipe names which one Caffe is built from. Source
fetching goes through a *private* apt configuration (its own sources folder, lists and cache
under caffetool's cache directory), so apt checks the archive's signatures as usual while the
machine's own apt sources stay untouched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from caffetool.errors import SourceError, SystemDependencyError
from caffetool.proc import last_lines

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
DEBIAN_SUITES = {"sid", "trixie", "bookworm", "bullseye", "buster", "stable", "testing", "unstable"}


@dataclass(frozen=True)
class Tarball:
    """One file of a source package, as the archive serves it."""

    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class SourcePackage:
    """A Debian source package, pinned by version and tarball checksums."""

    package: str
    version: str
    suite: str
    component: str
    upstream_commit: str
    tarballs: tuple[Tarball, ...]
    keyring: str = "/usr/share/keyrings/debian-archive-keyring.gpg"

    @property
    def orig(self) -> Tarball:
        """The upstream tarball (``.orig.``)."""
        return next(t for t in self.tarballs if ".orig." in t.name)

    @property
    def debian(self) -> Tarball:
        """Debian's packaging tarball (``.debian.``): ``debian/`` with its patch series."""
        return next(t for t in self.tarballs if ".debian." in t.name)


LOCK_WAIT = 600  # seconds apt waits for another apt's lock
_ONE_AT_A_TIME = threading.Lock()


def missing_packages(packages: tuple[str, ...] | list[str]) -> list[str]:
    """Packages that dpkg does not report as installed (all of them where dpkg is absent)."""
    if not shutil.which("dpkg-query"):
        return list(packages)
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\n", *packages],
        capture_output=True, text=True, check=False,
    )
    installed = {
        line.split()[0].split(":")[0]
        for line in result.stdout.splitlines()
        if len(line.split()) > 1 and line.split()[1].startswith("ii")
    }
    return [p for p in packages if p not in installed]


def owners(paths: list[Path]) -> dict[Path, str]:
    """The Debian package, with its version (``"zlib1g 1:1.2.13.dfsg-1"``), that installed each file
    of ``paths`` dpkg knows. On a merged-/usr system a package may have registered ``/lib/...`` for
    what resolves to ``/usr/lib/...`` (and the other way round), so both spellings are asked. Two
    dpkg-query calls in all: each call reads dpkg's whole database (about 0.1 s), and an engine
    linked to OpenCV vendors some 250 libraries."""
    spellings = {spelling: path for path in paths for spelling in (str(path), _merged_usr_alias(str(path)))
                 if spelling}
    if not spellings:
        return {}
    # unknown files only add "no path found" lines on stderr (and exit status 1)
    found = _dpkg_query("-S", *spellings)
    package_of: dict[Path, str] = {}
    for line in found.splitlines():
        owner, sep, spelling = line.partition(": ")
        if sep and not line.startswith("diversion by ") and spelling in spellings:
            # "pkg:amd64: /path", or "a:amd64, b:amd64: /path" for a file two packages share
            package_of.setdefault(spellings[spelling], owner.split(",")[0].split(":")[0].strip())
    listed = _dpkg_query("-W", "-f=${Package}\t${Version}\n", *sorted(set(package_of.values()))) if package_of else ""
    versions: dict[str, str] = {}
    for line in listed.splitlines():
        name, _, version = line.partition("\t")
        versions.setdefault(name, version.strip())
    return {path: f"{package} {versions.get(package, '')}".rstrip() for path, package in package_of.items()}


def _dpkg_query(*args: str) -> str:
    """What dpkg-query prints; nothing where it cannot run (the files are then named by path)."""
    try:
        return subprocess.run(["dpkg-query", *args], capture_output=True, text=True, check=False, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _merged_usr_alias(path: str) -> str | None:
    if path.startswith("/usr/lib/"):
        return path[len("/usr"):]
    return f"/usr{path}" if path.startswith("/lib/") else None


def _privilege_prefix() -> list[str] | None:
    """[] when root, ['sudo', '-n'] when password-less sudo works, else None."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(
        ["sudo", "-n", "true"], capture_output=True, check=False
    ).returncode == 0:
        return ["sudo", "-n"]
    return None


def install_packages(packages: tuple[str, ...] | list[str], log: Path | None = None) -> list[str]:
    """Install whichever of ``packages`` are missing; return the ones installed.

    Runs ``apt-get update`` first so a fresh machine (empty lists) works. Without root or
    password-less sudo, raises with the exact command for the user to run.
    """
    with _ONE_AT_A_TIME:  # the quickstart fetches data while the engine's packages install
        return _install(packages, log)


def _install(packages: tuple[str, ...] | list[str], log: Path | None) -> list[str]:
    missing = missing_packages(packages)
    if not missing:
        return []
    command = "apt-get install -y --no-install-recommends " + " ".join(missing)
    if not shutil.which("apt-get"):
        raise SystemDependencyError(
            f"these system packages are needed and this is not a Debian/Ubuntu system: "
            f"{' '.join(missing)} — install their equivalents, then rerun"
        )
    prefix = _privilege_prefix()
    if prefix is None:
        raise SystemDependencyError(
            "system packages are missing and neither root nor password-less sudo is available; "
            f"run: sudo apt-get update && sudo {command}"
        )
    env = {**os.environ, **APT_ENV}
    # Another apt at work (./bootstrap's, a second task's, unattended upgrades) is waited for, not failed on.
    wait = ["-o", f"DPkg::Lock::Timeout={LOCK_WAIT}"]
    for argv in (
        [*prefix, "apt-get", *wait, "update", "-q"],
        [*prefix, "apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *missing],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if log is not None:
            with open(log, "a") as f:
                f.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}\n")
        if done.returncode != 0:
            tail = last_lines(done.stdout + done.stderr, 5)
            raise SystemDependencyError(f"`{' '.join(argv)}` failed:\n{tail}")
    return missing


def system_debian_mirror(source_dirs: tuple[Path, ...] = (Path("/etc/apt"),)) -> str | None:
    """The Debian archive URI this machine's apt already uses, if any.

    Reusing it keeps corporate or local mirrors working. Security and update suites are
    skipped, since they do not carry bullseye's main source packages.
    """
    for base in source_dirs:
        files = sorted(base.glob("sources.list.d/*.sources")) + sorted(base.glob("sources.list.d/*.list"))
        if (base / "sources.list").exists():
            files.insert(0, base / "sources.list")
        for path in files:
            for uri, suites in _apt_entries(path.read_text(errors="replace"), path.suffix):
                if any(s in DEBIAN_SUITES for s in suites):
                    return uri.rstrip("/")
    return None


def _apt_entries(text: str, suffix: str) -> list[tuple[str, list[str]]]:
    if suffix == ".sources":  # deb822 stanzas
        entries = []
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(
                (m.group(1).lower(), m.group(2).strip())
                for m in re.finditer(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.M)
            )
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                for uri in fields.get("uris", "").split():
                    entries.append((uri, fields.get("suites", "").split()))
        return entries
    entries = []
    for line in text.splitlines():
        words = re.sub(r"\[[^\]]*\]", "", line.split("#")[0]).split()
        if len(words) >= 3 and words[0] == "deb":
            entries.append((words[1], [words[2]]))
    return entries


def fetch_source(pkg: SourcePackage, mirror: str, dest: Path, state_dir: Path) -> None:
    """Download ``pkg``'s files into ``dest`` with apt, verifying the archive's signature.

    ``state_dir`` holds the private sources file, lists and cache; the machine's apt sources
    are never read or written.
    """
    if not shutil.which("apt-get"):
        raise SourceError("apt-get is not available; pass --source DIR|URL with the two tarballs")
    if not Path(pkg.keyring).exists():
        raise SourceError(
            f"{pkg.keyring} is missing; install debian-archive-keyring, or pass --source DIR|URL"
        )
    sources = state_dir / "sources.list.d"
    lists = state_dir / "lists"
    cache = state_dir / "cache"
    for d in (sources, lists / "partial", cache / "archives" / "partial"):
        d.mkdir(parents=True, exist_ok=True)
    (sources / f"{pkg.package}.sources").write_text(
        f"Types: deb-src\nURIs: {mirror}\nSuites: {pkg.suite}\n"
        f"Components: {pkg.component}\nSigned-By: {pkg.keyring}\n"
    )
    options = [
        "-o", "Dir::Etc::sourcelist=/dev/null",
        "-o", f"Dir::Etc::sourceparts={sources}",
        "-o", f"Dir::State::Lists={lists}",
        "-o", f"Dir::Cache={cache}",
        "-q",
    ]
    if os.geteuid() == 0:  # the private folders are not readable by apt's sandbox user
        options += ["-o", "APT::Sandbox::User=root"]
    env = {**os.environ, **APT_ENV}
    steps = (
        ["apt-get", *options, "update"],
        ["apt-get", *options, "source", "--download-only", f"{pkg.package}={pkg.version}"],
    )
    for argv in steps:
        done = subprocess.run(argv, cwd=dest, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = last_lines(done.stdout + done.stderr)
            raise SourceError(
                f"apt could not fetch source package {pkg.package} {pkg.version} from "
                f"{mirror} ({pkg.suite}):\n{tail}\n"
                "If the suite has moved to Debian's long-term archive, pass --debian-mirror URL; "
                "offline, pass --source DIR holding the two tarballs"
            )
