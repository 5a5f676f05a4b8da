"""The commands before `spacy train`: `conllu` (UD data with UPOS as tag_), `pipeline` (what a
task config sources) and `config` (a shipped config). docs/training.md walks them end to end
(tests/test_docs.py)."""

import spacy
from promises import promised
from spacy.tokens import DocBin
from test_downstream import CONLLU
from thinc.api import Config
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.tasks.shipped_configs import config_names, config_path


class Ran:
    """A command's exit code and its output with the terminal's line breaks undone."""

    def __init__(self, arguments) -> None:
        result = CliRunner().invoke(app, [str(a) for a in arguments])
        self.exit_code, self.output = result.exit_code, " ".join(result.output.split())


def invoke(*arguments) -> Ran:
    return Ran(arguments)


def test_conllu_writes_upos_as_tags_for_the_tagger(tmp_path):
    source = tmp_path / "ewt.conllu"
    source.write_text(CONLLU, encoding="utf-8")
    result = invoke("conllu", source, tmp_path / "train.spacy")
    assert result.exit_code == 0, result.output
    assert "2 sentences, 7 words" in result.output
    docs = list(DocBin().from_disk(tmp_path / "train.spacy").get_docs(spacy.blank("en").vocab))
    assert [t.tag_ for t in docs[0]] == ["PRON", "AUX", "PART", "VERB", "PUNCT"], "UPOS, not XPOS"
    assert [t.text_with_ws for t in docs[0]] == ["I ", "do ", "n't ", "know", ". "], "SpaceAfter=No kept"
    assert [t.text for t in docs[1]] == ["Yes", "!"], "the empty node 1.1 is not a word"


def test_conllu_refuses_what_is_not_conllu_naming_the_line(tmp_path):
    source = tmp_path / "ner.conll"
    source.write_text("# a comment\nParis\tB-LOC\n", encoding="utf-8")
    result = invoke("conllu", source, tmp_path / "out.spacy")
    assert result.exit_code == 1
    assert "line 2" in result.output and "10 tab-separated columns" in result.output
    assert not (tmp_path / "out.spacy").exists()
    (tmp_path / "empty.conllu").write_text("# nothing\n", encoding="utf-8")
    result = invoke("conllu", tmp_path / "empty.conllu", tmp_path / "out.spacy")
    assert result.exit_code == 1 and "holds no sentence" in result.output


def test_config_writes_a_shipped_config_and_keeps_what_exists(tmp_path):
    assert set(config_names()) == {"upos-elmo", "upos-baseline", "ner-elmo", "ner-baseline"}
    output = tmp_path / "upos.cfg"
    assert invoke("config", "upos-elmo", output).exit_code == 0
    assert output.read_text(encoding="utf-8") == config_path("upos-elmo").read_text(encoding="utf-8")
    assert Config().from_disk(output, interpolate=False)["nlp"]["pipeline"] == ["sentencizer", "elmo", "tagger"]
    output.write_text("mine", encoding="utf-8")
    result = invoke("config", "upos-elmo", output)
    assert result.exit_code == 1 and "exists" in result.output and output.read_text(encoding="utf-8") == "mine"
    result = invoke("config", "pos-elmo", tmp_path / "other.cfg")
    assert result.exit_code == 1 and "upos-elmo" in result.output, "an unknown name lists the configs"


def test_pipeline_saves_sentencizer_and_elmo_with_its_settings(tiny_weights, tmp_path):
    output = tmp_path / "pipelines" / "elmo-downstream"
    result = invoke("pipeline", tiny_weights, output, "--sentence-cache-tokens", 1000, "--precision", "bf16")
    assert result.exit_code == 0, result.output
    nlp = spacy.load(output)
    assert nlp.pipe_names == ["sentencizer", "elmo"]
    settings = nlp.get_pipe("elmo").settings
    assert settings.sentence_cache_tokens == 1000 and settings.precision == "bf16"
    again = invoke("pipeline", tiny_weights, output)
    assert again.exit_code == 1 and "already exists" in again.output
    assert invoke("pipeline", tiny_weights, output, "--overwrite").exit_code == 0
    assert spacy.load(output).get_pipe("elmo").settings.precision == "fp32"
    wrong = invoke("pipeline", tiny_weights, tmp_path / "other", "--precision", "fp8")
    assert wrong.exit_code == 2 and "fp8" in wrong.output, "a usage error that names the choices"
    unreachable = "http://127.0.0.1:9/model.zip"  # refused before it is fetched: no download error
    negative = invoke("pipeline", unreachable, tmp_path / "other", "--sentence-cache-tokens", -1)
    assert negative.exit_code == 1 and "sentence_cache_tokens must be an integer >= 0" in negative.output
    assert not (tmp_path / "other").exists()


def test_each_shipped_config_scores_only_what_it_trains(tiny_weights, tmp_path):
    """The score `spacy train` picks the best model by is the trained component's: the sentencizer
    that comes frozen with the source pipeline is not scored, and the UPOS tagger's accuracy is
    reported as upos_acc (UD's UPOS read into tag_), with no pos_acc beside it."""
    from spacy.training import Example
    from spacy.util import load_model_from_config

    from spacy_elmo.tasks.conllu import make_upos_scorer

    source = tmp_path / "elmo-source"
    assert invoke("pipeline", tiny_weights, source).exit_code == 0
    trained = {"upos": {"upos_acc": 1.0}, "ner": {"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0}}
    for name in config_names():
        config = Config().from_disk(config_path(name), overrides={"paths.elmo": str(source)}, interpolate=False)
        weights = load_model_from_config(config, auto_fill=True).config["training"]["score_weights"]
        scored = {key: weight for key, weight in weights.items() if weight is not None}
        assert scored == trained[name.split("-")[0]], (name, weights)
    nlp = spacy.blank("en")
    gold = nlp.make_doc("The cat sat")
    for token, tag in zip(gold, ("DET", "NOUN", "VERB"), strict=True):
        token.tag_ = tag
    predicted = nlp.make_doc("The cat sat")
    for token, tag in zip(predicted, ("DET", "VERB", "VERB"), strict=True):
        token.tag_ = tag
    assert make_upos_scorer()([Example(predicted, gold)]) == {"upos_acc": 2 / 3}


def test_each_shipped_config_trains_at_most_the_documented_steps():
    """docs/training.md: the shipped configs train for at most task-max-steps (docs/promises.md)."""
    steps = {
        name: Config().from_disk(config_path(name), interpolate=False)["training"]["max_steps"]
        for name in config_names()
    }
    assert len(steps) == 4 and set(steps.values()) == {int(promised("task-max-steps"))}, steps
