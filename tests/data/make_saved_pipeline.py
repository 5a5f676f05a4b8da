"""Writes tests/data/pipeline-0.1.0: a pipeline saved by spacy-elmo 0.1.0 before the package was
split into subpackages, with what it gave for a text, so that test_public_api.py can check that a
pipeline saved then still loads and gives the same numbers. Uses the public API only; run once:

    .venv/bin/python tests/data/make_saved_pipeline.py

It holds a tiny biLM with random weights (seeded), centring on, and a tagger whose tok2vec
reads ELMo through the registered task-mix architectures, initialized (untrained) on two sentences.
"""

import json
from pathlib import Path

import numpy as np
import spacy
import torch
from spacy.training import Example

from spacy_elmo import BiLM, BiLMConfig, save_bilm

HERE = Path(__file__).parent
OUT = HERE / "pipeline-0.1.0"
TEXT = "The bank raised its rates. We sat on the bank of the river and watched the boats."
TRAIN = [
    ("Dogs run fast .", ["NOUN", "VERB", "ADV", "PUNCT"]),
    ("The river is wide .", ["DET", "NOUN", "AUX", "ADJ", "PUNCT"]),
]


def tagger_config() -> dict:
    mix = {"@architectures": "spacy-elmo.TaskMix.v1"}
    embed = {
        "@architectures": "spacy-elmo.ElmoEmbed.v1",
        "width": 16,
        "embed": {
            "@architectures": "spacy.MultiHashEmbed.v2",
            "width": 16,
            "attrs": ["NORM"],
            "rows": [50],
            "include_static_vectors": False,
        },
        "mix": mix,
    }
    encode = {
        "@architectures": "spacy.MaxoutWindowEncoder.v2",
        "width": 16,
        "depth": 1,
        "window_size": 1,
        "maxout_pieces": 2,
    }
    tok2vec = {"@architectures": "spacy.Tok2Vec.v2", "embed": embed, "encode": encode}
    elmo_tok2vec = {"@architectures": "spacy-elmo.ElmoTok2Vec.v1", "tok2vec": tok2vec, "mix": dict(mix)}
    return {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": elmo_tok2vec}}


def main() -> None:
    torch.manual_seed(2026)
    bilm = BiLM(BiLMConfig.preset("tiny"))
    with torch.no_grad():
        for name, param in bilm.named_parameters():
            if name.endswith("bias") or "embedding" in name:
                param.normal_(0, 0.3)
        bilm.char_encoder.embedding.weight[0] = 0
    weights = save_bilm(bilm.eval(), HERE / "tmp-weights")
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(weights), "center_vectors": True, "remove_directions": 1})
    nlp.add_pipe("tagger", config=tagger_config())
    examples = [Example.from_dict(nlp.make_doc(words), {"tags": tags}) for words, tags in TRAIN]
    nlp.initialize(lambda: examples)
    nlp.get_pipe("elmo").fit_centering(nlp.pipe([TEXT] * 60))
    doc = nlp(TEXT)
    nlp.to_disk(OUT)
    expected = {
        "layers": [token._.elmo_layers.tolist() for token in doc],
        "token": doc[1]._.elmo.tolist(),
        "token_vector": doc[1].vector.tolist(),
        "sentence": list(doc.sents)[0]._.elmo.tolist(),
        "doc_vector": doc.vector.tolist(),
        "similarity": float(doc[1].similarity(doc[10])),
        "tag_scores": nlp.get_pipe("tagger").predict([doc])[0].tolist(),
    }
    (OUT / "expected.json").write_text(json.dumps(expected))
    for path in sorted(weights.iterdir()):
        path.unlink()
    weights.rmdir()
    print(OUT, np.asarray(expected["layers"]).shape)


if __name__ == "__main__":
    main()
