"""thinc layers: the torch biLM and its runner behind thinc's PyTorchWrapper.

``spacy-elmo.BiLM.v1`` maps a batch of sentences (token strings) to their layers, one
``(L+1, T_i, 2P)`` array per sentence on the current device (cupy on GPU: tensors cross by DLPack,
no host copy). The wrapped module holds the ``BiLM`` (the weights thinc moves and saves) and the
``BiLMRunner`` that runs it, made when the component says how (``run_with``) and again where
thinc moves the weights. It serializes as safetensors plus its BiLMConfig, so loading rebuilds
the network at the sizes of the stored weights and nothing is unpickled.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
from typing import Any, Callable, Iterator, List, Optional, Tuple

import srsly
import torch
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, PyTorchWrapper_v3, torch2xp
from thinc.types import Floats3d
from torch import nn

from ..kernels.devices import made_current
from ..network.bilm import BiLM
from ..network.chars import TokenIndexer
from ..network.config import BiLMConfig
from ..network.runner import BiLMRunner, split_sentences
from ..network.token_cache import TokenCache

Sentences = List[List[str]]

_IMPORTED_IN = os.getpid()


class SentenceEncoder(nn.Module):
    """The torch module thinc wraps: sentences (token strings) -> layers (L+1, N, 2P), boundaries
    included, through ``runner`` (made by ``run_with``; until then an exact fp32 one, made at the
    first call)."""

    def __init__(self, bilm: BiLM) -> None:
        super().__init__()
        self.bilm = bilm
        self.runner: Optional[BiLMRunner] = None

    def run_with(self, precision: str, token_cache_bytes: Optional[int] = None) -> BiLMRunner:
        """The runner of ``precision`` whose token cache keeps at most ``token_cache_bytes``: this
        one's where it already runs that way, else a new one (what runs, chosen now)."""
        runner = self.runner
        if runner is None or runner.requested != precision or runner.token_cache.max_bytes != token_cache_bytes:
            runner = self.runner = BiLMRunner(self.bilm, precision, token_cache=TokenCache(max_bytes=token_cache_bytes))
        return runner

    def forward(self, sentences: Sentences) -> torch.Tensor:
        _single_thread_after_fork()
        runner = self.runner if self.runner is not None else self.run_with("fp32")
        return runner.layers(sentences)

    def _apply(self, fn: Any, recurse: bool = True) -> "SentenceEncoder":
        """thinc moves the weights (``to_gpu``, ``to_cpu``): the runner is made again for the
        device they are on now."""
        moved = super()._apply(fn, recurse)
        runner = self.runner
        if runner is not None and runner.backend.device != self.bilm.device:
            self.runner = runner.with_settings(precision=runner.requested)
        return moved

    def train(self, mode: bool = True) -> "SentenceEncoder":
        """Always eval: the biLM is frozen inside spaCy. (thinc's shim calls train() after every
        prediction; with threads sharing the component, that switched dropout on mid-prediction.)"""
        return super().train(False)


def _single_thread_after_fork() -> None:
    """In a worker of ``nlp.pipe(n_process=N)``, run torch on one thread: forked from the process
    that imported us, the parent's OpenMP thread pool does not survive ``fork`` and a parallel
    region would wait for it forever; spawned (the default on macOS and Windows) or started by a
    fork server, N workers of a thread per core each would ask for N times the cores. Results do
    not depend on the thread count."""
    worker = os.getpid() != _IMPORTED_IN or multiprocessing.parent_process() is not None
    if worker and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@registry.architectures("spacy-elmo.BiLM.v1")
def build_bilm(
    preset: str = "small",
    projection_dim: Optional[int] = None,
    lstm_dim: Optional[int] = None,
    n_layers: Optional[int] = None,
    n_highway: Optional[int] = None,
    char_embedding_dim: Optional[int] = None,
) -> Model[Sentences, List[Floats3d]]:
    """``spacy-elmo.BiLM.v1``: a biLM sized by ``preset``, with any size given explicitly overriding
    it. Weights loaded later (``initialize`` with weights, or a saved pipeline) bring their own
    sizes and replace these."""
    sizes = {
        "projection_dim": projection_dim,
        "lstm_dim": lstm_dim,
        "n_layers": n_layers,
        "n_highway": n_highway,
        "char_embedding_dim": char_embedding_dim,
    }
    config = BiLMConfig.preset(preset, **{k: v for k, v in sizes.items() if v is not None})
    return PyTorchWrapper_v3(
        SentenceEncoder(BiLM(config).eval()),
        convert_inputs=_sentences_in,
        convert_outputs=_layers_out,
        serialize_model=serialize_encoder,
        deserialize_model=deserialize_encoder,
    )


def get_bilm(model: Model) -> BiLM:
    """The torch BiLM inside a ``spacy-elmo.BiLM.v1`` model."""
    return encoder_of(model).bilm


def encoder_of(model: Model) -> SentenceEncoder:
    """The ``SentenceEncoder`` inside a ``spacy-elmo.BiLM.v1`` model."""
    return model.shims[0]._model


@contextlib.contextmanager
def on_bilm_device(model: Model) -> Iterator[None]:
    """Within the block, the calling thread's current CUDA device (torch's and cupy's) is the
    biLM's: each thread has its own, and a thread other than the one that called
    ``spacy.require_gpu`` (a Ray Data actor's, a web server's) would otherwise hand cupy arrays of
    one device to kernels launched on another. A no-op on the CPU."""
    with made_current(get_bilm(model).device):
        yield


def set_bilm(model: Model, bilm: BiLM) -> None:
    """Put ``bilm`` (any size) into a ``spacy-elmo.BiLM.v1`` model, on the device of the one it
    replaces, run the way that one ran (where a runner ran it)."""
    replaced = encoder_of(model)
    encoder = SentenceEncoder(bilm.to(replaced.bilm.device).eval())
    if replaced.runner is not None:
        encoder.run_with(replaced.runner.requested, replaced.runner.token_cache.max_bytes)
    model.shims[0]._model = encoder


def _sentences_in(model: Model, sentences: Sentences, is_train: bool) -> Tuple[ArgsKwargs, Any]:
    def backprop(d_inputs: Any) -> Sentences:
        return []

    return ArgsKwargs(args=(sentences,), kwargs={}), backprop


def _layers_out(
    model: Model, inputs_outputs: Tuple[Sentences, torch.Tensor], is_train: bool
) -> Tuple[List[Floats3d], Callable[[List[Floats3d]], ArgsKwargs]]:
    sentences, layers = inputs_outputs
    packed = torch2xp(layers.float())
    per_sentence = split_sentences(packed, [len(sentence) for sentence in sentences])

    def backprop(d_layers: List[Floats3d]) -> ArgsKwargs:
        raise NotImplementedError(
            "The elmo biLM is frozen inside spaCy: list the component in [training] "
            "frozen_components, and pretrain or fine-tune the biLM with training/pretrain.py."
        )

    return per_sentence, backprop


def serialize_encoder(encoder: SentenceEncoder) -> bytes:
    from safetensors.torch import save

    bilm = encoder.bilm
    state = {name: tensor.detach().to("cpu").contiguous() for name, tensor in bilm.state_dict().items()}
    message = {"config": json.dumps(bilm.config.to_dict()), "weights": save(state)}
    if bilm.indexer.has_tables:  # the model's own characters / words travel with it
        message["vocabulary"] = json.dumps(bilm.indexer.to_dict())
    return srsly.msgpack_dumps(message)


def deserialize_encoder(encoder: SentenceEncoder, data: bytes, device: torch.device) -> SentenceEncoder:
    from safetensors.torch import load

    from ..weights.native import load_state

    message = srsly.msgpack_loads(data)
    vocabulary = message.get("vocabulary")
    indexer = TokenIndexer.from_dict(json.loads(vocabulary)) if vocabulary else None
    bilm = BiLM(BiLMConfig.from_dict(json.loads(message["config"])), indexer)
    load_state(bilm, load(message["weights"]), "the pipeline's elmo model")
    return SentenceEncoder(bilm.to(device).eval())
