"""The unit suite on each Python the project supports (``requires-python = ">=3.11"``).

``make test`` runs the whole suite on 3.11 in ``.venv`` and then ``nox --session unit-3.12``
and ``nox --session unit-3.13`` side by side; ``nox -s unit-3.11`` runs the same session on the
floor version. Each session's venv installs what ``.venv`` installs, with the same uv
(``.tools/venv``, ``make install`` puts it there): the hashed ``requirements-dev.lock`` (the
runtime pins and the dev tools, resolved for 3.11 and up), then the project with ``--no-deps``.
A Python that is not installed is skipped with a line saying so; ``--error-on-missing-interpreters``
(``make test`` under ``CI=true``) makes it a failure. Nothing is downloaded but packages.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
LOCK = "requirements-dev.lock"
UV = ROOT / ".tools" / "venv" / "bin" / "uv"
PYTHONS = ["3.11", "3.12", "3.13"]

nox.options.sessions = ["unit"]
nox.options.default_venv_backend = "venv"
# A missing Python is a finding, not something to fetch: never a standalone build.
nox.options.download_python = "never"
# A venv is kept between runs and reinstalled only when what it installs changes (below).
nox.options.reuse_venv = "yes"


def _pyenv_pythons() -> list[str]:
    """The bin directories of pyenv's installed versions of PYTHONS. pyenv's shims run only the
    versions ``pyenv global`` selects (here 3.11), and nox resolves a shim the same way, so
    ``python3.12`` installed beside them would not be found through the shims alone."""
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    versions = Path(root) / "versions"
    if not versions.is_dir():
        return []
    found = []
    for python in PYTHONS:
        # Newest patch release first, so it wins the PATH lookup.
        executables = sorted(versions.glob(f"{python}.*/bin/python{python}"), key=_release)
        found += [str(executable.parent) for executable in reversed(executables)]
    return found


def _release(executable: Path) -> tuple[int, ...]:
    """``(3, 12, 1)`` for ``…/versions/3.12.1/bin/python3.12``."""
    return tuple(int(part) for part in executable.parents[1].name.split(".") if part.isdigit())


os.environ["PATH"] = os.pathsep.join([*_pyenv_pythons(), os.environ.get("PATH", "")])
# nox looks for a uv of its own (and logs "uv binary not found"); the project's is this one.
os.environ.setdefault("UV", str(UV))


def _inputs_digest() -> str:
    digest = hashlib.sha256()
    for name in (LOCK, "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()


def _install_locked(session: nox.Session) -> None:
    """Install the lock and the project, unless this venv already holds exactly that."""
    stamp = Path(session.virtualenv.location) / ".locked-inputs"
    digest = _inputs_digest()
    if stamp.exists() and stamp.read_text(encoding="utf-8") == digest:
        session.log("the venv already holds requirements-dev.lock and the project")
        return
    if not UV.exists():
        session.error(f"{UV.relative_to(ROOT)} is missing: `make install` installs it")
    uv_install = [str(UV), "pip", "install", "--quiet", "--compile-bytecode"]
    uv_install += ["--python", session.virtualenv.location]
    session.run_install(*uv_install, "--no-deps", "--require-hashes", "-r", LOCK, external=True)
    # The locked setuptools builds the project: no isolated build fetching an unpinned one.
    session.run_install(*uv_install, "--no-deps", "--no-build-isolation", "-e", ".", external=True)
    stamp.write_text(digest, encoding="utf-8")


@nox.session(python=PYTHONS)
def unit(session: nox.Session) -> None:
    """tests/unit on this Python, from the hashed locks."""
    _install_locked(session)
    # A cache of its own: the sessions run side by side.
    cache = f"cache_dir={Path(session.virtualenv.location) / '.pytest_cache'}"
    session.run("python", "-m", "pytest", "tests/unit", "-q", "-o", cache, *session.posargs)
