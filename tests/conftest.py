import json
import os
from pathlib import Path

import pytest
import torch

SHARED = Path(os.environ.get("SPACY_ELMO_SHARED", Path(__file__).resolve().parents[2] / "shared"))
FIXTURE = SHARED / "fixtures" / "elmo-allennlp"


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is missing: tests read shared data from ../shared (or $SPACY_ELMO_SHARED)")
    return path


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    return _require(FIXTURE)


@pytest.fixture(scope="session")
def fixture_sentences(fixture_dir):
    """3 streams of 10 tokenized sentences."""
    streams = json.loads((fixture_dir / "sentences.json").read_text())
    return [[sentence.split() for sentence in stream] for stream in streams]


@pytest.fixture(scope="session")
def fixture_bilm(fixture_dir):
    from spacy_elmo import import_original

    return import_original(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")


@pytest.fixture
def seeded():
    torch.manual_seed(1234)
    return 1234


def random_bilm(preset="tiny", **overrides):
    """A BiLM with random weights (biases too, so every parameter matters), in eval mode."""
    from spacy_elmo import BiLM, BiLMConfig

    bilm = BiLM(BiLMConfig.preset(preset, **overrides))
    with torch.no_grad():
        for name, param in bilm.named_parameters():
            if name.endswith("bias") or "embedding" in name:
                param.normal_(0, 0.3)
        bilm.char_encoder.embedding.weight[0] = 0
    return bilm.eval()


@pytest.fixture(scope="session")
def tiny_weights(tmp_path_factory):
    """A native biLM directory with random tiny weights."""
    from spacy_elmo import save_bilm

    torch.manual_seed(99)
    return save_bilm(random_bilm(), tmp_path_factory.mktemp("weights") / "tiny")


def make_nlp(weights, sentencizer=True, **config):
    import spacy

    nlp = spacy.blank("en")
    if sentencizer:
        nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(weights), **config})
    nlp.initialize()
    return nlp
