"""ELMo beyond English: the component in a Bulgarian pipeline, the built-in Bulgarian text, and the
demo's table of words per language (with its fallback for a language that has none)."""

import json
import re

import numpy as np
import pytest
import spacy
from typer.testing import CliRunner

from spacy_elmo.training import builtin_text
from spacy_elmo.training.packaging import demo

SENTENCE = "Григорианският календар е въведен в България през 1916 година."


def blank_pipeline(lang, weights):
    nlp = spacy.blank(lang)
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(weights)})
    nlp.initialize()
    return nlp


@pytest.fixture(scope="module")
def bulgarian(tiny_weights):
    return blank_pipeline("bg", tiny_weights)


def test_elmo_in_a_bulgarian_pipeline_has_the_documented_shapes(bulgarian):
    doc = bulgarian(f"{SENTENCE} От друга страна, статията е твърде кратка.")
    assert [len(s) for s in doc.sents] == [10, 9]
    assert doc._.elmo_data.shape == (3, 19, 32) and doc._.elmo_data.dtype == np.float32
    for sentence in doc.sents:
        assert sentence._.elmo.shape == (32,)
        np.testing.assert_allclose(sentence._.elmo, np.mean([t._.elmo for t in sentence], axis=0), rtol=1e-5, atol=1e-6)
    assert np.isfinite(doc._.elmo_data).all()


def test_cyrillic_words_get_their_own_character_vectors(bulgarian):
    doc = bulgarian("коса каса лук ключ")
    layer0 = doc._.elmo_data[0]
    assert all(not np.allclose(layer0[i], layer0[j]) for i in range(4) for j in range(i + 1, 4))


def test_the_same_bulgarian_sentence_gets_bitwise_the_same_vectors_in_two_docs(bulgarian):
    first = bulgarian(f"{SENTENCE} От друга страна, статията е твърде кратка.")
    second = bulgarian(f"Думите коса, ключ и лук имат по две значения. {SENTENCE}")
    ours, theirs = list(first.sents)[0], list(second.sents)[1]
    assert ours.text == theirs.text == SENTENCE
    assert np.array_equal(first._.elmo_data[:, ours.start : ours.end], second._.elmo_data[:, theirs.start : theirs.end])
    assert np.array_equal(ours._.elmo, theirs._.elmo) and np.array_equal(ours.vector, theirs.vector)


@pytest.fixture(scope="module")
def bulgarian_documents():
    return list(builtin_text.bulgarian_wikipedia_sample(builtin_text.gensim_data_dir()))


def test_the_built_in_bulgarian_text_is_clean_prose_in_sections(bulgarian_documents):
    text = "\n".join(p for document in bulgarian_documents for p in document)
    assert len(bulgarian_documents) >= 60 and len(text.split()) >= 25000
    for markup in ("(UTC)", "(УТЦ)", "<nowiki", "{{", "[[", "]]", "'''"):
        assert markup not in text, f"{markup!r} left in the cleaned text"
    letters = re.findall(r"[^\W\d_]", text)
    assert sum("\u0400" <= c <= "\u04ff" for c in letters) > 0.9 * len(letters)


def test_the_demo_words_for_bulgarian_occur_in_the_built_in_text(bulgarian_documents):
    words = [w.lower() for document in bulgarian_documents for p in document for w in re.findall(r"\w+", p)]
    shown = [w for w in demo.DEMO_TEXT["bg"].senses if words.count(w) >= 5]
    assert shown == ["страна", "ред", "стил"], shown


def test_a_language_without_built_in_text_says_to_pass_text():
    with pytest.raises(ValueError, match=r"'de'.*--vars\.text PATH"):
        builtin_text.builtin_sources("de")


def test_no_built_in_text_is_extracted_when_the_workflow_reads_other_text(tmp_path):
    output = tmp_path / "assets" / "text" / "de"
    args = ["gensim", str(output), "--lang", "de", "--corpus-text", str(tmp_path / "mine.txt")]
    result = CliRunner().invoke(builtin_text.app, args)
    assert result.exit_code == 0 and "no built-in text needed" in result.output
    assert not output.exists()


def test_max_docs_writes_the_first_documents_and_reads_the_source_no_further(tmp_path):
    read = []

    def documents():
        for number in range(10):
            read.append(number)
            yield [f"Paragraph {number}.", "Its second line."]

    assert builtin_text.write_documents(tmp_path / "three.txt", documents(), max_docs=3) == 3
    assert (tmp_path / "three.txt").read_text() == "\n\n".join(
        f"Paragraph {number}.\nIts second line." for number in range(3)
    ) + "\n"
    assert read == [0, 1, 2], "the documents after the third are never read"
    assert builtin_text.write_documents(tmp_path / "all.txt", documents(), max_docs=0) == 10
    refused = CliRunner().invoke(builtin_text.app, ["gensim", str(tmp_path / "out"), "--max-docs", "-1"])
    assert refused.exit_code == 2 and "'--max-docs'" in refused.output and not (tmp_path / "out").exists()


def write_shard(directory, sentences):
    directory.mkdir(parents=True)
    (directory / "shard-00000.jsonl").write_text("\n".join(json.dumps(s, ensure_ascii=False) for s in sentences) + "\n")


def test_a_small_held_out_reference_is_topped_up_with_training_sentences(tmp_path):
    write_shard(tmp_path / "test", [["Една", "кратка", "фраза", "."]])
    write_shard(tmp_path / "train", [["Две", "думи", "тук", "."], ["а"], ["Три", "думи", "и", "още", "."]] * 3)
    sentences, held_out = demo.reference_sentences(
        tmp_path / "test", tmp_path / "train", max_sentences=100, min_tokens=12
    )
    assert held_out == 1 and [len(s) for s in sentences] == [4, 4, 5]
    assert "13 tokens: 4 of held-out sentences (fewer than 12)" in demo.reference_summary(sentences, held_out, 12)
    enough, _ = demo.reference_sentences(tmp_path / "test", tmp_path / "train", max_sentences=100, min_tokens=4)
    assert (
        enough == sentences[:1] and demo.reference_summary(enough, 1, 4) == "Reference: 4 tokens of held-out sentences."
    )


def test_the_demo_falls_back_to_frequent_content_words_without_a_table(tiny_weights):
    nlp = blank_pipeline("de", tiny_weights)
    sentences = [["Der", "Kalender", "hat", "zwölf", "Monate", "."], ["Jeder", "Kalender", "zählt", "die", "Tage", "."]]
    reference = demo.reference_tokens(nlp, sentences)
    assert demo.frequent_words(reference.labels, 2)[0] == "kalender"
    report = "\n".join(demo.word_and_sentence_report(nlp, reference, k=2, n_words=1, described="held-out text"))
    assert "no word list for language 'de'" in report and "no sentence pairs for language 'de'" in report
    assert "== 'kalender' in two sentences of the reference text ==" in report
