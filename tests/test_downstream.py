"""Downstream data: EWT and WNUT readers, nested training subsets, the tasks' unlabeled text."""

import json

import spacy

from spacy_elmo.tasks.conllu import conllu_docs
from spacy_elmo.training.corpus import read_sentences
from spacy_elmo.training.downstream.data import nested_subsets, save_task_text, wnut_docs

CONLLU = """# sent_id = a
# text = I don't know.
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\tSpaceAfter=No
5\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = b
1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\tSpaceAfter=No
1.1\tgone\t_\t_\t_\t_\t_\t_\t_\t_
2\t!\t!\tPUNCT\t.\t_\t1\tpunct\t_\t_
"""
WNUT = "@paulwalk\tO\nvisits\tO\nEmpire\tB-location\nState\tI-location\n\nok\tO\n"


def test_ewt_reader_keeps_syntactic_words_and_upos(tmp_path):
    path = tmp_path / "ewt.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    docs = conllu_docs(path, spacy.blank("en").vocab)
    assert [[t.text for t in d] for d in docs] == [["I", "do", "n't", "know", "."], ["Yes", "!"]]
    assert [t.tag_ for t in docs[0]] == ["PRON", "AUX", "PART", "VERB", "PUNCT"]
    assert [t.whitespace_ for t in docs[0]][:4] == [" ", " ", " ", ""], "SpaceAfter=No is kept"


def test_wnut_reader_reads_entities(tmp_path):
    path = tmp_path / "wnut.conll"
    path.write_text(WNUT, encoding="utf-8")
    docs = wnut_docs(path, spacy.blank("en").vocab)
    assert [(e.text, e.label_) for e in docs[0].ents] == [("Empire State", "location")]
    assert len(docs) == 2 and docs[1][0].ent_iob_ == "O"


def test_training_subsets_are_nested_and_seeded():
    nlp = spacy.blank("en")
    docs = [nlp.make_doc(f"sentence {i}") for i in range(1000)]
    subsets = nested_subsets(docs, (1, 10, 100), seed=0)
    texts = {k: {d.text for d in v} for k, v in subsets.items()}
    assert [len(texts[k]) for k in (1, 10, 100)] == [10, 100, 1000]
    assert texts[1] <= texts[10] <= texts[100]
    assert texts[1] == {d.text for d in nested_subsets(docs, (1, 10, 100), seed=0)[1]}
    assert texts[1] != {d.text for d in nested_subsets(docs, (1, 10, 100), seed=1)[1]}


def test_task_text_is_a_corpus_of_the_gold_tokens(tmp_path):
    nlp = spacy.blank("en")
    train = [nlp.make_doc("Hello  world !"), nlp.make_doc(" ".join(["w"] * 600))]
    manifest = save_task_text(
        {"train": train, "dev": [nlp.make_doc("A b")], "test": [nlp.make_doc("C")]}, tmp_path / "text"
    )
    sentences = list(read_sentences(tmp_path / "text" / "train"))
    assert sentences[0] == ["Hello", "world", "!"], "whitespace tokens are dropped"
    assert [len(s) for s in sentences[1:]] == [256, 256, 88], "long sentences are cut as in the component"
    assert manifest["splits"]["train"] == {"shards": 1, "sentences": 4, "tokens": 603}
    assert json.loads((tmp_path / "text" / "manifest.json").read_text()) == manifest
    assert list(read_sentences(tmp_path / "text" / "test")) == [["C"]]


def test_data_files_and_language_are_settings(tmp_path):
    import typer
    from spacy.tokens import DocBin
    from typer.testing import CliRunner

    from spacy_elmo.training.downstream.data import main

    for split in ("train", "dev", "test"):
        (tmp_path / "tags").mkdir(exist_ok=True)
        (tmp_path / "tags" / f"{split}.conllu").write_text(CONLLU, encoding="utf-8")
        (tmp_path / "ents").mkdir(exist_ok=True)
        (tmp_path / "ents" / f"ner.{split}").write_text(WNUT, encoding="utf-8")
    app = typer.Typer()
    app.command()(main)
    arguments = [
        str(tmp_path),
        str(tmp_path / "out"),
        "--lang",
        "de",
        "--upos",
        "tags/{split}.conllu",
        "--ner",
        "ents/ner.{split}",
    ]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    nlp = spacy.blank("de")
    tagged = list(DocBin().from_disk(tmp_path / "out" / "upos-test.spacy").get_docs(nlp.vocab))
    assert [t.tag_ for t in tagged[1]] == ["INTJ", "PUNCT"]
    entities = list(DocBin().from_disk(tmp_path / "out" / "ner-dev.spacy").get_docs(nlp.vocab))
    assert [(e.text, e.label_) for e in entities[0].ents] == [("Empire State", "location")]
    missing = CliRunner().invoke(app, [str(tmp_path), str(tmp_path / "out2"), "--ner", "wnut17/{split}.conll"])
    assert missing.exit_code != 0 and "en_ewt-ud-train.conllu" in str(missing.exception), "the default files are EWT's"


def test_every_shared_word_similarity_set_is_scored_by_default(tmp_path):
    import pytest
    from conftest import SHARED

    from spacy_elmo.training.downstream.similarity import SETS, read_pairs

    folder = SHARED / "data" / "word-similarity"
    if not folder.is_dir():
        pytest.skip(f"{folder} is missing")
    files = {item.partition("=")[2] for item in SETS}
    assert files == {f"word-similarity/{path.name}" for path in folder.glob("*.txt")}
    for name in files:
        pairs = read_pairs(SHARED / "data" / name)
        assert pairs and all(len(row) == 3 and float(row[2]) >= 0 for row in pairs), name
    (tmp_path / "bad.txt").write_text("sun\tsunlight\t50.0\r\nsun sunshine 47.0\n")
    with pytest.raises(ValueError, match=r"bad.txt, line 2: expected word<TAB>word<TAB>score, got 'sun sunshine"):
        read_pairs(tmp_path / "bad.txt")


def test_typed_mix_settings_give_the_dict_that_the_extensions_read():
    import pytest

    from spacy_elmo.pipeline.mix_settings import MixSettings

    assert MixSettings.average(3) == MixSettings.for_layers(3)
    assert MixSettings.from_dict(MixSettings.average(3).as_dict()) == MixSettings.average(3)
    with pytest.raises(ValueError, match="layer_weights has 2 values but the biLM has 3 layers"):
        MixSettings.for_layers(3, [0.5, 0.5])
    assert MixSettings([0.2, 0.5, 0.3]).layer_weights == (0.2, 0.5, 0.3)
    with pytest.raises(ValueError, match="must be finite"):
        MixSettings((0.5, float("nan")))
    with pytest.raises(ValueError, match="pooling must be one of"):
        MixSettings((1.0,), pooling="median")


def test_report_gives_means_over_seeds_and_the_layer_weights_plot(tmp_path, monkeypatch):
    import numpy as np
    from conftest import run_report

    monkeypatch.chdir(tmp_path)
    metrics = tmp_path / "metrics" / "downstream"
    metrics.mkdir(parents=True)

    def run(task, size, variant, seed_scores, **extra):
        std = float(np.std(seed_scores, ddof=1)) if len(seed_scores) > 1 else 0.0
        record = {
            "task": task,
            "size": size,
            "variant": variant,
            "score": float(np.mean(seed_scores)),
            "score_std": std,
            "seed_scores": seed_scores,
        }
        (metrics / f"{task}-{size}-{variant}.json").write_text(json.dumps({**record, **extra}))

    run("upos", 1, "baseline", [0.70, 0.72, 0.74])
    run("upos", 1, "elmo", [0.80, 0.81, 0.82], layer_weights=[0.2, 0.5, 0.3], gamma=0.9)
    run("ner", 100, "baseline", [0.20])
    run("ner", 100, "elmo", [0.25], layer_weights=[0.3, 0.3, 0.4], gamma=1.1)
    text = run_report()
    assert "| 1% | 3 | 72.00 ± 2.00 | 81.00 ± 1.00 | +9.00 |" in text
    assert "| 1 | 20.00 | 25.00 | +5.00 |" in text
    assert "UPOS 1%: softmax(s) = [0.200, 0.500, 0.300], gamma = 0.900" in text
    assert "![layer weights](out/downstream-layer-weights.png)" in text
    assert (tmp_path / "out" / "downstream-layer-weights.png").stat().st_size > 10000
    assert json.loads((tmp_path / "out" / "downstream.json").read_text())["runs"]["upos-1-elmo"]["seed_scores"] == [
        0.80,
        0.81,
        0.82,
    ]


def test_without_matplotlib_the_downstream_commands_say_so_first_and_keep_their_numbers(tmp_path, monkeypatch):
    """A missing train extra is said when a plotting command starts, not after its runs: the report
    is written without its plot; precision and centering decide the same way before any work."""
    import sys

    import pytest
    from conftest import run_report

    from spacy_elmo.training.downstream import centering, precision
    from spacy_elmo.training.loop.curve import PlotSkipped

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    run = {"task": "ner", "size": 100, "score": 0.25, "score_std": 0.0, "seed_scores": [0.25]}
    elmo = {**run, "variant": "elmo", "layer_weights": [0.3, 0.3, 0.4], "gamma": 1.1}
    recorded = {"runs": {"ner-100-baseline": {**run, "variant": "baseline"}, "ner-100-elmo": elmo}, "bilm": {}}
    (tmp_path / "recorded.json").write_text(json.dumps(recorded))
    with pytest.warns(PlotSkipped, match=r"downstream.report writes its results without its plot.*train extra"):
        text = run_report("--recorded", "recorded.json")
    assert "| 1 | 25.00 | 25.00 | +0.00 |" in text and "![layer weights]" not in text
    out = tmp_path / "out"
    assert (out / "downstream.json").exists() and not (out / "downstream-layer-weights.png").exists()
    started = []  # what each command reached before it was stopped: the check comes first
    monkeypatch.setattr(precision, "check_run", lambda *arguments: started.append("precision runs"))
    monkeypatch.setattr(centering, "reference_vectors", lambda *arguments: started.append("centering runs"))
    for module in (precision, centering):
        monkeypatch.setattr(module, "plots_here", stop_at_check)
        with pytest.raises(CheckedFirst):
            call_with_defaults(module.main, tmp_path)
    assert started == [], "each command asks whether it can plot before it runs anything"


class CheckedFirst(Exception):
    pass


def stop_at_check(command):
    raise CheckedFirst(command)


def call_with_defaults(command, folder):
    """``command`` called with every typer option at a value that does no work yet."""
    import inspect

    arguments = {}
    for name, parameter in inspect.signature(command).parameters.items():
        default = parameter.default.default if hasattr(parameter.default, "default") else parameter.default
        arguments[name] = folder if default is ... else default
    return command(**arguments)


def test_report_from_a_recorded_downstream_json(tmp_path, monkeypatch):
    from conftest import run_report

    monkeypatch.chdir(tmp_path)
    run = {"task": "ner", "size": 100, "score": 0.25, "score_std": 0.0, "seed_scores": [0.25]}
    recorded = {
        "runs": {"ner-100-baseline": {**run, "variant": "baseline", "score": 0.2}, "ner-100-elmo": run},
        "wic": {"layer 0": {"threshold": 0.5, "dev_accuracy": 0.55, "test_accuracy": 0.52}},
        "similarity": {},
        "bilm": {"description": "a recorded biLM."},
    }
    (tmp_path / "recorded.json").write_text(json.dumps(recorded))
    text = run_report("--recorded", "recorded.json")
    assert "biLM: a recorded biLM." in text and "| 1 | 20.00 | 25.00 | +5.00 |" in text
    assert "| layer 0 | 55.0 | 52.0 |" in text
