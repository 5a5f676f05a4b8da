"""What spacy-elmo writes takes the modes the user's umask gives any other file (0644 and 0755
under umask 022), so converted weights and embedded corpora can sit on shared storage: the atomic
writes' temporaries are made with those modes, not tempfile's private 0600 and 0700."""

import os
import stat

import pytest

from spacy_elmo.files import atomic_directory, atomic_write_text, directory_beside


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def modes_under(folder):
    """Each file's and folder's mode under ``folder``, by its path relative to it."""
    return {str(path.relative_to(folder)): mode(path) for path in sorted(folder.rglob("*"))}


def test_atomic_writes_take_the_modes_of_plain_writes(tmp_path, umask_022):
    assert mode(atomic_write_text(tmp_path / "a.json", "{}")) == 0o644
    for replace in (False, True):
        with atomic_directory(tmp_path / "folder", replace=replace) as building:
            (building / "inside.txt").write_text("x")
        assert mode(tmp_path / "folder") == 0o755 and mode(tmp_path / "folder" / "inside.txt") == 0o644
    beside = directory_beside(tmp_path / "checkpoint")
    assert mode(beside) == 0o755
    beside.rmdir()
    os.umask(0o077)  # a stricter umask gives stricter modes, as it would to open()
    assert mode(atomic_write_text(tmp_path / "b.json", "{}")) == 0o600
    assert not list(tmp_path.glob(".*")), "no temporary is left behind"


def test_converted_weights_and_embedded_vectors_can_be_shared(tmp_path, fixture_dir, umask_022):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app
    from spacy_elmo.corpus.embedding import EmbedSettings, embed_corpus

    converted = CliRunner().invoke(
        app,
        ["convert", str(fixture_dir / "options.json"), str(fixture_dir / "lm_weights.hdf5"), str(tmp_path / "bilm")],
    )
    assert converted.exit_code == 0, converted.output
    source = tmp_path / "lines.txt"
    source.write_text("The first line .\nA second line, with more tokens in it.\n", encoding="utf-8")
    settings = EmbedSettings(weights=str(tmp_path / "bilm"), lang="en", block_lines=1)
    embed_corpus(source, tmp_path / "vectors", settings, progress=False)
    for folder in (tmp_path / "bilm", tmp_path / "vectors"):
        modes = modes_under(folder)
        assert modes and all(m == (0o755 if (folder / name).is_dir() else 0o644) for name, m in modes.items()), modes
        assert mode(folder) == 0o755


def test_a_pretraining_checkpoint_can_be_resumed_by_another_account(tmp_path, umask_022):
    """Every file of a checkpoint folder (the optimizer's and RNG's safetensors among them) takes the
    umask's mode, so that a run on shared storage can be resumed by another user of the group."""
    import torch
    from conftest import random_bilm

    from spacy_elmo.training.loop.checkpoint import load_checkpoint, save_checkpoint
    from spacy_elmo.training.vocab import SPECIALS, Vocabulary

    vocab = Vocabulary(list(SPECIALS) + ["the"], [5, 5, 1, 3])
    optimizer = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(4)}}, "param_groups": [{"lr": 0.1}]}
    rng = {"torch": torch.get_rng_state()}
    folder = save_checkpoint(tmp_path / "checkpoints", 7, random_bilm(), vocab, optimizer, {"step": 7}, rng)
    modes = modes_under(folder)
    assert {"optimizer.safetensors", "rng.safetensors", "model.safetensors"} <= set(modes), modes
    assert all(m == 0o644 for m in modes.values()) and mode(folder) == 0o755, modes
    assert load_checkpoint(folder)[1] == {"step": 7}
