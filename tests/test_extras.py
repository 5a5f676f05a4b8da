"""An error that needs an extra gives a pip command that works wherever spacy-elmo came from: the
extra's packages by name, as the installed metadata (setup.py) declares them, and the extra for a
clone; never the package index's name alone, which finds nothing while spacy-elmo is not on one."""

import ast
import re

import pytest
from conftest import ROOT, setup_extras
from packaging.requirements import Requirement

from spacy_elmo.extras import install_command, requirements


@pytest.mark.parametrize("extra", sorted(set(setup_extras()) - {"dev"}))
def test_each_extra_is_installed_by_the_command_its_messages_give(extra):
    declared = [Requirement(line) for line in setup_extras()[extra]]
    here = [r for r in declared if r.marker is None or r.marker.evaluate()]
    assert sorted(str(Requirement(line)) for line in requirements(extra)) == sorted(
        str(Requirement(f"{r.name}{'[' + ','.join(sorted(r.extras)) + ']' if r.extras else ''}{r.specifier}"))
        for r in here
    )
    command = install_command(extra)
    assert command.startswith("pip install ") and f'pip install ".[{extra}]" in a clone of spacy-elmo' in command
    for package in requirements(extra):
        assert f'"{package}"' in command


def test_no_message_of_the_package_names_an_index_install_that_finds_nothing():
    """`pip install spacy-elmo[...]` is no command a message may give while the package is on no index."""
    index_form = re.compile(r"pip install ['\"]?spacy-elmo\[")
    found = []
    for path in sorted([*ROOT.glob("spacy_elmo/**/*.py"), *ROOT.glob("training/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and index_form.search(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
