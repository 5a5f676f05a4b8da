"""Task mixes without sizes: the elmo component fills them in, so the shipped configs work for any biLM."""

from pathlib import Path

import pytest
import spacy
from spacy.cli.init_config import fill_config
from spacy.training import Example
from spacy.util import load_config

from spacy_elmo.pipeline.task_mix import task_mixes
from spacy_elmo.tasks.shipped_configs import config_names, config_path

CONFIGS = [config_path(name) for name in config_names()]
ELMO_CONFIGS = [path for path in CONFIGS if path.stem.endswith("-elmo")]
TINY_SIZES = (3, 32)  # (L+1, 2P) of the tiny biLM
TAGS = {"words": ["Dogs", "run", "fast", "."], "tags": ["NOUN", "VERB", "ADV", "PUNCT"]}


def tagger(embed_output: bool = False, **mix) -> dict:
    """A tagger's config: ElmoEmbed in spacy.Tok2Vec.v2, and with ``embed_output`` ElmoTok2Vec
    around it; ``mix``: the TaskMix settings."""
    mix = {"@architectures": "spacy-elmo.TaskMix.v1", **mix}
    tok2vec = {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": {
            "@architectures": "spacy-elmo.ElmoEmbed.v1",
            "width": 16,
            "embed": {
                "@architectures": "spacy.MultiHashEmbed.v2",
                "width": 16,
                "attrs": ["NORM"],
                "rows": [100],
                "include_static_vectors": False,
            },
            "mix": mix,
        },
        "encode": {
            "@architectures": "spacy.MaxoutWindowEncoder.v2",
            "width": 16,
            "depth": 1,
            "window_size": 1,
            "maxout_pieces": 2,
        },
    }
    if embed_output:
        tok2vec = {"@architectures": "spacy-elmo.ElmoTok2Vec.v1", "tok2vec": tok2vec, "mix": dict(mix)}
    return {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}}


def mix_sizes(nlp, name):
    return [(mix.maybe_get_dim("nL"), mix.maybe_get_dim("nO")) for mix in task_mixes(nlp.get_pipe(name).model)]


def test_a_loaded_elmo_component_fills_in_the_mixes_after_it(tiny_elmo_pipeline):
    """As in spacy train: the sourced elmo component is frozen, so spaCy initializes the tagger with
    docs it has not run on; the sizes are known by then."""
    nlp = spacy.load(tiny_elmo_pipeline)
    nlp.add_pipe("tagger", config=tagger(embed_output=True))
    assert mix_sizes(nlp, "tagger") == [TINY_SIZES, TINY_SIZES]
    assert nlp.get_pipe("elmo").listening_components == ["tagger"]
    with nlp.select_pipes(disable=["elmo"]):
        nlp.initialize(lambda: [Example.from_dict(nlp.make_doc("Dogs run fast ."), TAGS)])
    assert len(nlp("Cats run slowly .")) == 4
    nlp.add_pipe("tagger", name="explicit", config=tagger(width=32, n_layers=3))
    assert mix_sizes(nlp, "explicit") == [TINY_SIZES]
    message = (
        r"The task mix has width=64 in its config, but the 'elmo' component before 'wrong' gives layers of "
        r"shape \(L\+1=3, n, 2P=32\): leave width and n_layers out .* or set width = 32"
    )
    with pytest.raises(ValueError, match=message):
        nlp.add_pipe("tagger", name="wrong", config=tagger(width=64))


def test_a_fresh_pipeline_sizes_its_task_layers_at_initialize(tiny_weights):
    """A new elmo component has its biLM's sizes only once initialize loads the weights; it then fills
    in the later mixes before spaCy initializes their components with docs it has not run on."""
    fresh = spacy.blank("en")
    fresh.add_pipe("elmo", config={"weights": str(tiny_weights)})
    for name, embed_output in (("embed_only", False), ("embed_and_output", True)):
        fresh.add_pipe("tagger", name=name, config=tagger(embed_output=embed_output))
    assert mix_sizes(fresh, "embed_and_output") == [(None, None)] * 2
    fresh.initialize(lambda: [Example.from_dict(fresh.make_doc("Dogs run fast ."), TAGS)])
    assert mix_sizes(fresh, "embed_and_output") == [TINY_SIZES] * 2
    output_layer = fresh.get_pipe("embed_and_output").model.layers[-1].layers[0]
    assert output_layer.get_dim("nI") == 16 + 32, "the tagger's output layer reads [h_k; ELMo_k]"
    doc = fresh("Cats run slowly .")
    assert len(doc._.elmo_data) == 3 and all(token.tag_ in TAGS["tags"] for token in doc)


def test_init_fill_config_on_every_shipped_config(tiny_elmo_pipeline, tmp_path):
    """spacy init fill-config loads the sourced elmo pipeline, so [paths] elmo is set first (fill-config
    takes no overrides); the filled +ELMo configs still leave the mix's sizes to the elmo component."""
    for path in CONFIGS:
        base = tmp_path / path.name
        load_config(path, overrides={"paths.elmo": str(tiny_elmo_pipeline)}, interpolate=False).to_disk(base)
        _, filled = fill_config(tmp_path / f"filled-{path.name}", base, silent=True)
        assert filled["nlp"]["pipeline"] == load_config(path)["nlp"]["pipeline"]
        if path in ELMO_CONFIGS:
            component = filled["nlp"]["pipeline"][-1]
            mix = filled["components"][component]["model"]["tok2vec"]["embed"]["mix"]
            assert (mix["width"], mix["n_layers"]) == (None, None), f"{path.name}: {mix}"
    assert len(ELMO_CONFIGS) == 2


def debug_config(capsys, config, corpus, pipeline, **overrides):
    """`spacy debug config` in this process (the function its command runs): (passed, its output)."""
    from spacy.cli.debug_config import debug_config as spacy_debug_config

    overrides = {"paths.train": str(corpus), "paths.dev": str(corpus), "paths.elmo": str(pipeline), **overrides}
    try:
        spacy_debug_config(Path(config), overrides=overrides)
        passed, failure = True, ""
    except (SystemExit, Exception) as error:  # a refused config: msg.fail's exit, or the error itself
        passed, failure = False, str(error)
    printed = capsys.readouterr()
    return passed, printed.out + printed.err + failure


@pytest.mark.slow
def test_debug_config_passes_on_every_shipped_config(tiny_elmo_pipeline, upos_corpus, capsys):
    """The shipped configs are complete ([initialize], the readers' and [training]'s settings), as
    spacy debug config needs; a mix's width that disagrees with the sourced biLM fails it."""
    for config in CONFIGS:
        passed, output = debug_config(capsys, config, upos_corpus, tiny_elmo_pipeline)
        assert passed and "Config is valid" in output, output[-3000:]
    width = {"components.tagger.model.tok2vec.embed.mix.width": 256}
    passed, output = debug_config(capsys, config_path("upos-elmo"), upos_corpus, tiny_elmo_pipeline, **width)
    assert not passed and "has width=256 in its config, but the 'elmo' component before 'tagger'" in output
