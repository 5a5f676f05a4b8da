"""Docs outlive their pipeline: rebuilt from bytes in a fresh process (Doc.to_bytes, DocBin,
nlp.pipe(n_process=...)) they read their vectors after ``import spacy_elmo``; serializing them
warns about nothing. The writing process never imports spacy_elmo itself: spaCy finds the factory
by its entry point."""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import SHARED, make_nlp

from spacy_elmo import install_vector_hooks

TEXT = "The bank raised its rates. We sat on the bank of the river and watched the boats."
STORES = ("layers", "mix", "tensor")

# What a doc shows its users, as JSON; run in the writing and in the reading process.
SUMMARY = """
import json, sys
from pathlib import Path
import numpy as np
import spacy

def summary(doc):
    first = list(doc.sents)[0]
    values = {
        "token": doc[1]._.elmo, "token_vector": doc[1].vector, "sentence": first._.elmo,
        "sentence_vector": first.vector, "doc": doc._.elmo, "doc_vector": doc.vector,
        "similarity": doc[1].similarity(doc[10]), "has_vector": [t.has_vector for t in doc],
    }
    return {k: np.asarray(v).tolist() for k, v in values.items()}
"""

WRITER = (
    SUMMARY
    + """
from spacy.tokens import DocBin
weights, folder, text, reference = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
expected = {}
for store in ("layers", "mix", "tensor"):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    # this script never imports spacy_elmo: spaCy finds the factory and its architecture by their entry points
    nlp.add_pipe("elmo", config={"weights": weights, "store": store, "center_vectors": True, "remove_directions": 2})
    nlp.initialize()
    nlp.get_pipe("elmo").fit_centering(nlp.pipe(Path(reference).read_text().splitlines()[:100]))
    doc = nlp(text)
    (folder / f"{store}.doc").write_bytes(doc.to_bytes())
    docbin = DocBin(store_user_data=True)
    docbin.add(doc)
    docbin.to_disk(folder / f"{store}.spacy")
    (piped,) = nlp.pipe([text], n_process=2)
    (folder / f"{store}.piped").write_bytes(piped.to_bytes())
    expected[store] = summary(doc)
print(json.dumps(expected))
"""
)

READER = (
    SUMMARY
    + """
import spacy_elmo
from spacy.tokens import Doc, DocBin, Span, Token
# what the import registered, before anything else here could (spacy.blank loads spaCy's entry points)
names = [(Doc, "elmo_data"), (Doc, "elmo"), (Span, "elmo"), (Token, "elmo"), (Token, "elmo_layers")]
found = {"registered": [kind.has_extension(name) for kind, name in names]}
folder, vocab = Path(sys.argv[1]), spacy.blank("en").vocab
for path in sorted(folder.iterdir()):
    if path.suffix == ".spacy":
        (doc,) = DocBin().from_disk(path).get_docs(vocab)
    else:
        doc = Doc(vocab).from_bytes(path.read_bytes())
    found[path.name] = summary(spacy_elmo.install_vector_hooks(doc))
print(json.dumps(found))
"""
)


def run_python(script, *args):
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True)


@pytest.mark.slow
def test_docs_read_their_vectors_in_a_fresh_process(tiny_weights, tmp_path):
    written = run_python(WRITER, tiny_weights, tmp_path, TEXT, SHARED / "data" / "corpus" / "valid.txt")
    assert written.returncode == 0, written.stderr
    assert "W109" not in written.stderr, "neither doc.to_bytes nor nlp.pipe's workers warn about hooks"
    expected = json.loads(written.stdout)
    for summary in expected.values():
        assert not np.allclose(summary["token_vector"], summary["token"]), "centred vectors are what is checked"
    (tmp_path / "tensor.spacy").unlink()  # DocBin does not keep doc.tensor, the only thing that store keeps
    read = run_python(READER, tmp_path)
    assert read.returncode == 0, read.stderr
    found = json.loads(read.stdout)
    assert found.pop("registered") == [True] * 5, "the extensions come with `import spacy_elmo`"
    files = {f"{store}.{kind}" for store in STORES for kind in ("doc", "spacy", "piped")}
    assert set(found) == files - {"tensor.spacy"}
    for name, summary in found.items():
        for key, value in expected[name.split(".")[0]].items():
            np.testing.assert_allclose(summary[key], value, rtol=0, atol=1e-6, err_msg=f"{name}: {key}")


def test_registering_again_leaves_extensions_and_data_alone(tiny_weights):
    from spacy.tokens import Doc

    from spacy_elmo.pipeline.extensions import register_extensions

    doc = make_nlp(tiny_weights)(TEXT)
    layers, before = doc._.elmo_data, Doc.get_extension("elmo")
    register_extensions()
    assert Doc.get_extension("elmo") == before and doc._.elmo_data is layers


def test_serializing_a_doc_warns_nothing(tiny_weights, recwarn):
    doc = make_nlp(tiny_weights)(TEXT)
    doc.to_bytes()
    assert not [str(w.message) for w in recwarn if "W109" in str(w.message)]


@pytest.mark.parametrize("store", STORES)
def test_docs_from_worker_processes_carry_their_vectors(tiny_weights, store, capfd):
    nlp = make_nlp(tiny_weights, store=store)
    texts = [TEXT, "Short.", "Another sentence with a bank in it."]
    single = [nlp(text) for text in texts]
    for one, forked in zip(single, nlp.pipe(texts, n_process=2), strict=True):
        np.testing.assert_array_equal(forked[1]._.elmo, one[1]._.elmo)
        np.testing.assert_array_equal(forked._.elmo, one._.elmo)
        install_vector_hooks(forked)
        np.testing.assert_array_equal(forked.vector, one.vector)
        assert forked[0].similarity(forked[1]) == one[0].similarity(one[1])
    assert "W109" not in capfd.readouterr().err, "the workers serialize docs without warning"
