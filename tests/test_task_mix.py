from itertools import pairwise

import numpy as np
import pytest
import spacy
from conftest import ROOT, make_nlp
from spacy.ml.models import MaxoutWindowEncoder, MultiHashEmbed, build_Tok2Vec_model
from spacy.tokens import Doc
from thinc.api import Adam

from spacy_elmo import ElmoEmbed, ElmoTok2Vec, TaskMix
from spacy_elmo.pipeline.task_mix import mix_weights, task_mixes

VOCAB = spacy.blank("en").vocab


def docs_with_layers(seed=0, n_docs=6, width=8, n_layers=3):
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n_docs):
        n = int(rng.integers(2, 7))
        doc = Doc(VOCAB, words=["w"] * n)
        doc._.elmo_data = rng.normal(size=(n_layers, n, width)).astype("float32")
        docs.append(doc)
    return docs


def train_to_match_layer(l2, steps=300, target_layer=2, scale=2.0):
    """Fit the mix so that its output equals scale * layer[target_layer], with a per-token loss
    (mean squared error over a token's features) summed over tokens, as spaCy's losses are."""
    model = TaskMix(width=8, n_layers=3, dropout=0.0, l2=l2)
    docs = docs_with_layers()
    model.initialize()
    optimizer = Adam(0.05)
    for _ in range(steps):
        outputs, backprop = model.begin_update(docs)
        backprop([(y - scale * d._.elmo_data[target_layer]) / y.shape[1] for y, d in zip(outputs, docs, strict=True)])
        model.finish_update(optimizer)
    return model


def test_the_mix_learns_the_useful_layer():
    model = train_to_match_layer(l2=0.0)
    weights, gamma = mix_weights(model)
    assert weights[2] > 0.9 and abs(gamma - 2.0) < 0.2, (weights, gamma)


def test_l2_on_s_pulls_towards_the_plain_average():
    uniform = np.full(3, 1 / 3)
    lambdas = (0.001, 0.1, 1.0, 10.0)
    distance = [np.abs(mix_weights(train_to_match_layer(l2=l2))[0] - uniform).max() for l2 in lambdas]
    assert distance[0] > 0.5, "a small lambda lets the weights move"
    assert all(a > b for a, b in pairwise(distance)), f"a larger lambda pulls harder: {distance}"
    assert distance[2] < distance[0] / 2, "lambda = 1 keeps them much nearer the plain average"
    model = TaskMix(width=8, n_layers=3, dropout=0.0, l2=0.3)
    model.initialize()
    model.set_param("s", model.ops.asarray1f([0.5, -1.0, 2.0]))
    docs = docs_with_layers()
    outputs, backprop = model.begin_update(docs)
    backprop([np.zeros_like(y) for y in outputs])  # no task gradient: only the penalty remains
    n_tokens = sum(len(d) for d in docs)
    np.testing.assert_allclose(model.get_grad("s"), 2 * 0.3 * n_tokens * np.array([0.5, -1.0, 2.0]), rtol=1e-6)


def test_gradients_match_finite_differences():
    model = TaskMix(width=8, n_layers=3, dropout=0.0, l2=0.01)
    model.initialize()
    model.set_param("s", model.ops.asarray1f([0.3, -0.2, 0.1]))
    model.set_param("gamma", model.ops.asarray1f([1.3]))
    docs = docs_with_layers(seed=3)
    directions = [np.random.default_rng(9).normal(size=d._.elmo_data.shape[1:]).astype("float64") for d in docs]

    def loss():
        outputs, _ = model.begin_update(docs)
        s = model.get_param("s").astype("float64")
        n_tokens = sum(len(d) for d in docs)
        return sum(float((y * g).sum()) for y, g in zip(outputs, directions, strict=True)) + 0.01 * n_tokens * float(
            (s * s).sum()
        )

    outputs, backprop = model.begin_update(docs)
    backprop([g.astype("float32") for g in directions])
    analytic = {"s": model.get_grad("s").copy(), "gamma": model.get_grad("gamma").copy()}
    for name in ("s", "gamma"):
        value = model.get_param(name).copy()
        for i in range(len(value)):
            numeric = []
            for sign in (1, -1):
                shifted = value.copy()
                shifted[i] += sign * 1e-3
                model.set_param(name, shifted)
                numeric.append(loss())
            model.set_param(name, value)
            assert analytic[name][i] == pytest.approx((numeric[0] - numeric[1]) / 2e-3, rel=2e-2, abs=2e-3), (name, i)


def test_dropout_only_when_training():
    model = TaskMix(width=8, n_layers=3, dropout=0.5)
    model.initialize()
    docs = docs_with_layers()
    predicted = model.predict(docs)
    trained, _ = model.begin_update(docs)
    expected = [d._.elmo_data.mean(axis=0) for d in docs]
    assert all(np.allclose(p, e, atol=1e-6) for p, e in zip(predicted, expected, strict=True))
    zeros = sum(int((t == 0).sum()) for t in trained) / sum(t.size for t in trained)
    assert 0.35 < zeros < 0.65


def test_clear_errors():
    model = TaskMix(width=8, n_layers=3)
    model.initialize()
    with pytest.raises(ValueError, match="without ELMo layers: the 'elmo' component must run before"):
        model.predict([Doc(VOCAB, words=["no", "layers"])])
    with pytest.raises(ValueError, match=r"has width=8 in its config, but a doc's elmo_data gives .*2P=16"):
        model.predict(docs_with_layers(width=16))
    mixed_only = Doc(VOCAB, words=["only", "mixed"])
    mixed_only._.elmo_mix = {"layer_weights": [1.0], "gamma": 1.0, "pooling": "mean"}
    mixed_only._.elmo_vectors = np.ones((2, 8), dtype="float32")  # what store = "mix" keeps
    with pytest.raises(ValueError, match="store = 'mix'.*set store = \"layers\""):
        model.predict([mixed_only])


@pytest.mark.slow
def test_tiny_spacy_train_with_the_shipped_elmo_config(tiny_elmo_pipeline, upos_corpus, tmp_path):
    """The shipped config as it is: the mix's sizes come from the sourced elmo component, and the
    sourced sentencizer keeps the source pipeline's sentences, so its vectors too."""
    from spacy.cli.train import train  # what `python -m spacy train CONFIG --output OUT --paths.train ...` runs

    overrides = {
        "paths.train": str(upos_corpus),
        "paths.dev": str(upos_corpus),
        "paths.elmo": str(tiny_elmo_pipeline),
        "training.max_steps": 60,
        "training.eval_frequency": 20,
    }
    train(ROOT / "spacy_elmo" / "tasks" / "configs" / "upos-elmo.cfg", tmp_path / "out", overrides=overrides)
    nlp = spacy.load(tmp_path / "out" / "model-last")
    doc = nlp("The dog sat on the mat .")
    assert nlp.pipe_names == ["sentencizer", "elmo", "tagger"] and [t.tag_ for t in doc][:2] == ["DET", "NOUN"]
    text = "We sat on the bank. The bank raised its rates."  # two sentences: ELMo's context is each one
    trained, source = nlp(text), spacy.load(tiny_elmo_pipeline)(text)
    assert [s.text for s in trained.sents] == [s.text for s in source.sents] and len(list(source.sents)) == 2
    assert np.array_equal(trained._.elmo_data, source._.elmo_data), "training kept the source's vectors"
    (mix,) = task_mixes(nlp.get_pipe("tagger").model)
    assert (mix.get_dim("nL"), mix.get_dim("nO")) == (3, 32), "the tiny biLM's sizes, saved with the model"
    weights, gamma = mix_weights(mix)
    assert not np.allclose(weights, 1 / 3) or gamma != 1.0, "the mix trained and was saved with the pipeline"


def tiny_docs(tiny_weights):
    """Docs the tiny pipeline ran on: layers (L+1 = 3, n, 2P = 32)."""
    nlp = make_nlp(tiny_weights)
    return list(nlp.pipe(["The cat sat on the mat.", "Dogs run fast.", "A b"]))


def test_the_mix_takes_its_sizes_from_the_docs(tiny_weights):
    docs = tiny_docs(tiny_weights)
    expected = [doc._.elmo_data.mean(axis=0) for doc in docs]  # s = 0, gamma = 1: the plain average
    at_init = TaskMix(dropout=0.0)
    at_init.initialize(X=docs)
    assert (at_init.get_dim("nL"), at_init.get_dim("nO")) == (3, 32)
    on_first_pass = TaskMix(dropout=0.0)
    on_first_pass.initialize()
    assert not on_first_pass.has_dim("nO")
    for model in (at_init, on_first_pass):
        assert all(np.allclose(y, e, atol=1e-6) for y, e in zip(model.predict(docs), expected, strict=True))
    assert on_first_pass.get_param("s").shape == (3,)
    embed = ElmoEmbed(MultiHashEmbed(width=16, attrs=["NORM"], rows=[100], include_static_vectors=False), TaskMix(), 16)
    embed.initialize(X=docs)
    assert [y.shape for y in embed.predict(docs)] == [(len(doc), 16) for doc in docs]
    projection = embed.layers[-1].layers[0]  # chain(concatenate(embed, mix), with_array(Maxout))
    assert projection.get_dim("nI") == 16 + 32, "the projection's input width is inferred from the mix's"


def test_sizes_that_disagree_with_the_layers_are_errors(tiny_weights):
    docs = tiny_docs(tiny_weights)
    with pytest.raises(ValueError, match=r"has width=64 in its config, but the initialization docs' elmo_data gives "):
        TaskMix(width=64).initialize(X=docs)
    late = TaskMix(n_layers=2)
    late.initialize()
    shape = r"layers of shape \(L\+1=3, n, 2P=32\): leave width and n_layers out .* or set n_layers = 3"
    with pytest.raises(ValueError, match=r"has n_layers=2 in its config, but a doc's elmo_data gives " + shape):
        late.predict(docs)
    unannotated = [Doc(VOCAB, words=["no", "layers"])]
    sizeless = TaskMix()
    sizeless.initialize(X=unannotated)
    with pytest.raises(ValueError, match="cannot tell the biLM's width and number of layers at initialization"):
        sizeless.predict(unannotated)
    with pytest.raises(ValueError, match=r"width and n_layers >= 1 \(or null"):
        TaskMix(width=0)


def test_elmo_at_the_encoder_output_too():
    embed = ElmoEmbed(
        MultiHashEmbed(width=16, attrs=["NORM"], rows=[100], include_static_vectors=False), TaskMix(width=8), width=16
    )
    tok2vec = build_Tok2Vec_model(embed, MaxoutWindowEncoder(width=16, depth=1, window_size=1, maxout_pieces=2))
    model = ElmoTok2Vec(tok2vec, TaskMix(width=8))
    docs = docs_with_layers()
    model.initialize(X=docs)
    outputs, backprop = model.begin_update(docs)
    assert [y.shape for y in outputs] == [(len(d), 24) for d in docs] and model.get_dim("nO") == 24
    backprop([np.ones_like(y) for y in outputs])
    mixes = task_mixes(model)
    assert len(mixes) == 2 and all(float(np.abs(m.get_grad("gamma")).sum()) > 0 for m in mixes)
