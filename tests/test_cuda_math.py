"""Inference on a GPU runs IEEE fp32 whatever the process's TF32 settings, and puts them back: the
switch itself is global state and is checked here on any machine (setting the flags needs no GPU)."""

import threading

import pytest
import torch

from spacy_elmo.kernels.devices import ieee_fp32

CUDA = torch.device("cuda")


def tf32_flags():
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.fixture
def tf32_on():
    """A process that asked for TF32 everywhere; its settings back as they were after the test."""
    before = tf32_flags()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_tf32_is_off_inside_and_the_process_setting_back_after(tf32_on):
    with ieee_fp32(CUDA):
        assert tf32_flags() == (False, False)
    assert tf32_flags() == (True, True)


def test_an_error_inside_still_puts_the_setting_back(tf32_on):
    with pytest.raises(RuntimeError, match="boom"):
        with ieee_fp32(CUDA):
            raise RuntimeError("boom")
    assert tf32_flags() == (True, True)


def test_off_cuda_nothing_changes(tf32_on):
    with ieee_fp32(torch.device("cpu")):
        assert tf32_flags() == (True, True)


def test_overlapping_calls_from_threads_keep_tf32_off_until_the_last_one_ends(tf32_on):
    """The first thread out must not turn TF32 back on under a thread still inside."""
    inside, release_first = threading.Event(), threading.Event()
    seen = []

    def first():
        with ieee_fp32(CUDA):
            inside.set()
            release_first.wait(10)
        seen.append(("first left", tf32_flags()))

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(10)
    with ieee_fp32(CUDA):
        release_first.set()
        thread.join(10)
        seen.append(("second inside", tf32_flags()))
    assert seen == [("first left", (False, False)), ("second inside", (False, False))]
    assert tf32_flags() == (True, True)
