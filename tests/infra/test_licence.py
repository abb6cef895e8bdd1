"""The project's licence, as the ecosystem reads one: the Apache License 2.0 word for word in
LICENSE, and pyproject.toml's PEP 639 fields (an SPDX expression and the files it ships), built
by a setuptools that reads them."""

from __future__ import annotations

import hashlib
import tomllib

from packaging.requirements import Requirement

from tests.infra.cfn_yaml import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
#: The SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the standard text (as
#: s3transfer, yarl and propcache ship it; boto3's wheel has its terms without the appendix).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
#: setuptools' first release that reads ``license`` as an expression and ``license-files``.
PEP_639_SETUPTOOLS = "77.0.3"


def test_the_licence_file_is_the_apache_license_2_0_word_for_word() -> None:
    text = (REPO_ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256


def test_pyproject_states_the_licence_as_an_spdx_expression_with_its_files() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert "LICENSE" in project["license-files"]
    for pattern in project["license-files"]:
        assert list(REPO_ROOT.glob(pattern)), f"license-files: {pattern} matches no file"


def test_no_licence_classifier_beside_the_expression() -> None:
    """PEP 639 supersedes the classifiers; setuptools refuses a project that has both."""
    classifiers = PYPROJECT["project"].get("classifiers", [])
    assert [c for c in classifiers if c.startswith("License ::")] == []


def test_the_build_needs_a_setuptools_that_reads_pep_639() -> None:
    [setuptools] = [
        Requirement(line)
        for line in PYPROJECT["build-system"]["requires"]
        if Requirement(line).name == "setuptools"
    ]
    assert not setuptools.specifier.contains("77.0.2")
    assert setuptools.specifier.contains(PEP_639_SETUPTOOLS)
