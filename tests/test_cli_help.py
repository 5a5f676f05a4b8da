"""Each command's --help in an 80-column terminal names every option whole: nothing cut to
"--max-concurrent-reque…" (the help wraps to COLUMNS as click lays it out), no line wider."""

import re

import pytest
import typer
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.training import pretrain

COLUMNS = 80
GROUP = typer.main.get_command(app)
PRETRAIN = typer.main.get_command(pretrain.app)
# name -> (the app, its arguments for the help, the command whose options it shows)
HELPS = {name: (app, [name, "--help"], command) for name, command in GROUP.commands.items()}  # type: ignore[attr-defined]
HELPS["pretrain"] = (pretrain.app, ["--help"], PRETRAIN)


def option_names(command) -> list:
    """Every name an option of ``command`` goes by (``--batching`` and ``--no-batching`` both)."""
    return [name for param in command.params for name in [*param.opts, *param.secondary_opts] if name[0] == "-"]


def test_serve_is_held_to_it():
    assert "--max-concurrent-requests" in option_names(HELPS["serve"][2])


@pytest.mark.parametrize("name", sorted(HELPS))
def test_help_in_80_columns_names_every_option_whole(name):
    root, arguments, command = HELPS[name]
    result = CliRunner().invoke(root, arguments, env={"COLUMNS": str(COLUMNS)})
    assert result.exit_code == 0, result.output
    whole = [rf"(?<![\w-]){re.escape(option)}(?![\w-])" for option in option_names(command)]
    cut = [
        option
        for option, pattern in zip(option_names(command), whole, strict=True)
        if not re.search(pattern, result.output)
    ]
    assert not cut, f"{name} --help in {COLUMNS} columns does not show {cut} whole:\n{result.output}"
    wide = [line for line in result.output.splitlines() if len(line) > COLUMNS]
    assert not wide, wide
