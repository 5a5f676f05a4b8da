"""Results do not depend on torch's thread count (several processes of one thread each must write
what one process of several threads writes)."""

import numpy as np
import torch
from conftest import random_bilm

from spacy_elmo import embed_sentences

SENTENCES = [
    ["The", "bank", "raised", "its", "interest", "rates", "."],
    ["We", "sat", "on", "the", "river", "bank", "."],
]


def test_layers_are_the_same_with_one_thread_and_with_two():
    """The `small` preset's highway and projection matmuls have K = 2048, where BLAS kernels split
    the sum across threads unless the blocks keep K small."""
    threads = torch.get_num_threads()
    torch.manual_seed(11)
    bilm = random_bilm("small")
    bilm.token_cache.capacity = 0
    try:
        torch.set_num_threads(1)
        one = embed_sentences(bilm, SENTENCES)
        torch.set_num_threads(2)
        two = embed_sentences(bilm, SENTENCES)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
