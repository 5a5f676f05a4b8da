"""Results do not depend on torch's thread count (several processes of one thread each must write
what one process of several threads writes)."""

import numpy as np
import torch
from conftest import random_bilm

from spacy_elmo import BiLMRunner, embed_sentences

SENTENCES = [
    ["The", "bank", "raised", "its", "interest", "rates", "."],
    ["We", "sat", "on", "the", "river", "bank", "."],
]


def test_layers_are_the_same_with_one_thread_and_with_two():
    """The `small` preset's highway and projection matmuls have K = 2048, where BLAS kernels split
    the sum across threads unless the blocks keep K small."""
    threads = torch.get_num_threads()
    torch.manual_seed(11)
    runner = BiLMRunner(random_bilm("small"))
    runner.token_cache.capacity = 0
    try:
        torch.set_num_threads(1)
        one = embed_sentences(runner, SENTENCES)
        torch.set_num_threads(2)
        two = embed_sentences(runner, SENTENCES)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)


def test_elementwise_functions_give_the_same_bits_on_any_thread_count():
    """Large slices run on every thread (a whole number of single-thread slices each): each
    element must still take the code path it takes on one thread, wherever it sits."""
    from spacy_elmo.kernels.batch_invariant import _SINGLE_THREAD_ELEMENTS, elementwise_

    threads = torch.get_num_threads()
    x = torch.randn(7 * _SINGLE_THREAD_ELEMENTS + 123, generator=torch.Generator().manual_seed(3)) * 4
    one_slice_at_a_time = x.clone()
    flat = one_slice_at_a_time.view(-1)
    try:
        torch.set_num_threads(1)
        for start in range(0, flat.numel(), _SINGLE_THREAD_ELEMENTS):
            flat[start : start + _SINGLE_THREAD_ELEMENTS].sigmoid_()
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            assert torch.equal(elementwise_(torch.Tensor.sigmoid_, x.clone()), one_slice_at_a_time), f"{count} threads"
    finally:
        torch.set_num_threads(threads)


def test_a_loaded_pipeline_decides_everything_at_load_and_calls_change_no_thread_count(tiny_elmo_pipeline, monkeypatch):
    """Probes set torch's thread count while they run (to check each count): they run when a
    pipeline is loaded, never inside a call, where other threads may be in the middle of a matmul.
    Docs of 1 to 60 words, in both precisions, one at a time and in batches, on pipelines never
    called before."""
    import spacy

    pipelines = [
        spacy.load(tiny_elmo_pipeline, config={"components": {"elmo": {"precision": precision}}})
        for precision in ("fp32", "int8")
    ]
    changes = []
    monkeypatch.setattr(torch, "set_num_threads", lambda count: changes.append(count))
    texts = [" ".join(f"w{i}x{length}" for i in range(length)) + "." for length in range(1, 61)]
    for nlp in pipelines:
        for text in texts:
            nlp(text)
        list(nlp.pipe(texts, batch_size=7))
    assert changes == []
