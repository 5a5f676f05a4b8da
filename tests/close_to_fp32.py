"""How close a reduced precision comes to fp32, held to docs/promises.md's rows: on the test model's
three streams of sentences and on the full-size model with three streams of real text. Shared by
the CPU's tests (tests/test_precision.py) and the GPU's (tests/test_gpu.py)."""

import numpy as np
import torch
from conftest import SHARED, _require
from promises import promised

from spacy_elmo import BiLM, BiLMConfig, BiLMRunner, embed_sentences

# docs/promises.md's rows per precision and model: (largest difference from fp32 as a share of the
# layer's largest fp32 value, lowest cosine of a token's vectors)
CLOSE_TO_FP32 = {
    ("bf16", "test model"): (promised("bf16-relative"), promised("bf16-cosine")),
    ("int8", "test model"): (promised("int8-relative"), promised("int8-cosine")),
    ("bf16", "full-size model"): (promised("bf16-full-relative"), promised("bf16-full-cosine")),
    ("int8", "full-size model"): (promised("int8-full-relative"), promised("int8-full-cosine")),
}
# The full-size model's sentences: this many lines of real text, evenly spaced, cut at this many tokens
REAL_LINES, REAL_TOKENS = 30, 60


def cosines(a, b):
    """Each row's cosine: a, b (..., D) -> (...)."""
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def layer_errors(bilm, sentences, precision):
    """Per layer, over every token: (max |precision - fp32|, lowest cosine of a token's vectors,
    largest |fp32| value), both runs on ``bilm``'s device."""
    exact = np.concatenate(embed_sentences(BiLMRunner(bilm, precision="fp32"), sentences), axis=1)
    reduced = np.concatenate(embed_sentences(BiLMRunner(bilm, precision=precision), sentences), axis=1)
    assert not np.array_equal(exact, reduced), f"{precision} should actually run in {precision}"
    return [
        (np.abs(want - got).max(), cosines(want, got).min(), np.abs(want).max())
        for want, got in zip(exact, reduced, strict=True)
    ]


def assert_as_promised(bilm, streams, precision, model):
    """Every layer of every stream of ``streams`` within docs/promises.md's rows for ``precision``
    on ``model``: the largest difference from fp32 as a share of the layer's largest value, and
    each token's cosine."""
    relative, cosine = CLOSE_TO_FP32[precision, model]
    for stream, sentences in enumerate(streams):
        for layer, (error, lowest, largest) in enumerate(layer_errors(bilm, sentences, precision)):
            where = f"{precision} on the {model}, stream {stream}, layer {layer}"
            assert error <= relative * largest, (
                f"{where}: max abs error {error:.2e} is {error / largest:.3%} of the layer's largest value "
                f"{largest:.3f}, over the {relative:.0%} docs/promises.md gives"
            )
            assert lowest >= cosine, f"{where}: a token's cosine {lowest:.6f} < the {cosine} docs/promises.md gives"


def full_size_bilm():
    """The full-size model (the ``original`` preset) with torch's initialization from seed 0."""
    torch.manual_seed(0)
    return BiLM(BiLMConfig.preset("original")).eval()


def real_streams():
    """Three streams of 10 lines of real text (``REAL_LINES`` lines of valid.txt evenly spaced,
    each cut at ``REAL_TOKENS`` tokens)."""
    text = _require(SHARED / "data" / "corpus" / "valid.txt").read_text(encoding="utf-8")
    lines = [line.split() for line in text.splitlines() if line.strip()]
    picked = [lines[index][:REAL_TOKENS] for index in np.linspace(0, len(lines) - 1, REAL_LINES).astype(int)]
    streams = [picked[start : start + 10] for start in range(0, REAL_LINES, 10)]
    assert [len(stream) for stream in streams] == [10, 10, 10]
    return streams
