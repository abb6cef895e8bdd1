"""The type stubs are a dev dependency: every module of the worker imports without them.

The image installs the runtime lock only, so a stub imported outside ``TYPE_CHECKING``
would stop the worker at start-up there, while every test here (stubs installed) passes.
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import importlib, pkgutil, sys

class NoStubs:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0].startswith(("types_aiobotocore", "botocore_stubs")):
            raise ImportError(f"{name} is a dev dependency")

sys.meta_path.insert(0, NoStubs())
import worker

names = [m.name for m in pkgutil.walk_packages(worker.__path__, "worker.")]
for name in names:
    if not name.endswith("__main__"):  # running it would parse this script's arguments
        importlib.import_module(name)
print(len(names))
"""


def test_every_worker_module_imports_without_the_stubs() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 40  # the walk found the package, not nothing
