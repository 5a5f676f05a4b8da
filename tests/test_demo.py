"""The demo of a packaged pipeline: which tokens it searches neighbours among, its sense tables, and
how it reports a word in two senses."""

import numpy as np
import pytest
import spacy

from spacy_elmo.training.packaging import demo
from spacy_elmo.training.packaging.demo_text import DEMO_TEXT


@pytest.fixture(scope="module")
def english(tiny_weights):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_weights)})
    nlp.initialize()
    return nlp


@pytest.mark.parametrize(
    "sentence, kept",
    [
        ("The play ended early .", ["play", "ended"]),
        ("Young children swim .", ["children"]),  # not the first word, nor the last
        ("A bank , a river , and the bank !", ["bank", "river"]),
    ],
)
def test_neighbours_are_content_words_with_a_word_on_either_side(sentence, kept):
    doc = spacy.blank("en")(sentence)
    assert [doc[i].text for i in demo.meaningful_positions(doc)] == kept


@pytest.mark.parametrize("lang", sorted(DEMO_TEXT))
def test_every_sense_sentence_uses_its_word_away_from_the_sentence_end(lang):
    """The table's promise: the word, in the exact form, as a token with a word after it."""
    tokenizer = spacy.blank(lang)
    for word, senses in DEMO_TEXT[lang].senses.items():
        assert len(senses) == 2
        for sense in senses:
            for sentence in sense.sentences:
                doc = tokenizer(sentence)
                positions = [t.i for t in doc if t.lower_ == word]
                assert positions, f"{word!r} not a token of {sentence!r}"
                assert any(t.is_alpha for t in doc[positions[0] + 1 :]), f"{word!r} ends {sentence!r}"


def test_senses_are_told_apart_only_when_both_senses_hold_together():
    east, north, north_east = np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.6, 0.8])
    within, across = demo.sense_agreement([[east, east], [north, north_east]])
    assert within == pytest.approx([1.0, 0.8]) and across == pytest.approx((0.0 + 0.6 + 0.0 + 0.6) / 4)
    assert min(within) > across
    within, across = demo.sense_agreement([[east, north], [east, north]])
    assert not min(within) > across


def test_a_word_in_two_senses_is_shown_side_by_side_with_its_verdict(english):
    sentences = [s.split() for s in ["The bank lent money to the firm .", "We rested on the river bank today ."]]
    reference = demo.reference_tokens(english, sentences * 3)
    assert {word for word, _ in reference.labels} == {"bank", "lent", "money", "rested", "river"}
    lines, told_apart = demo.senses_report(english, "bank", DEMO_TEXT["en"].senses["bank"], reference, k=2)
    text = "\n".join(lines)
    assert lines[0] == "== 'bank' in two senses ==" and isinstance(told_apart, bool)
    assert "the same sense in two sentences: money " in text and ("-> told apart" in text) == told_apart
    assert 'money: "She paid the cheque into her bank account on Monday."' in lines[3]
    assert '| river: "We sat on the bank of the river and watched the boats."' in lines[3]
    assert len(lines) == 3 + 1 + 2 + 1, "heading, cosines, layer 0, the sentences, k rows of neighbours, a gap"


@pytest.mark.parametrize("apart", [True, False])
def test_the_report_says_told_apart_exactly_when_each_senses_uses_agree_more(english, monkeypatch, apart):
    """With each use's vector chosen, the verdict is known beforehand: the two uses of a sense
    along one axis per sense (told apart), or every use along one axis but one (not told apart)."""
    sentences = [s.split() for s in ["The bank lent money to the firm .", "We rested on the river bank today ."]]
    reference = demo.reference_tokens(english, sentences * 3)
    senses = DEMO_TEXT["en"].senses["bank"]
    axes = np.eye(english.get_pipe("elmo").bilm.config.output_dim, dtype=np.float32)
    chosen = {
        sense.sentences[use]: axes[index if apart else (1 if (index, use) == (1, 1) else 0)]
        for index, sense in enumerate(senses)
        for use in (0, 1)
    }
    monkeypatch.setattr(demo, "word_vectors", lambda nlp, sentence, word, ref: (chosen[sentence], chosen[sentence]))
    lines, told_apart = demo.senses_report(english, "bank", senses, reference, k=2)
    assert told_apart is apart
    assert lines[1].endswith("-> told apart" if apart else "-> NOT told apart"), lines[1]


def test_a_word_missing_from_its_sense_sentence_is_a_table_error(english):
    reference = demo.reference_tokens(english, [["The", "bank", "lent", "money", "."]] * 2)
    with pytest.raises(ValueError, match="has no token 'banks'.*demo_text.py"):
        demo.word_vectors(english, "The bank lent money.", "banks", reference)


def test_two_columns_line_up():
    lines = demo.side_by_side(["left one", "left two is long"], ["right"])
    assert lines == ["  left one         | right", "  left two is long |"]
