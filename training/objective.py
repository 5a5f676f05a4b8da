"""The paper's pretraining objective: the log likelihood of a forward and a backward language model
that share the token representation and the softmax but keep separate LSTMs."""
from __future__ import annotations

from typing import Tuple

import torch.nn.functional as F
from torch import Tensor, nn

from spacy_elmo.bilm import BiLM

from .batching import TrainingBatch
from .softmax import LogUniformSampler, full_nll, sampled_nll

SOFTMAXES = ("full", "sampled")


class LanguageModelLoss(nn.Module):
    """BiLM with an LM head -> summed NLL of the forward and of the backward predictions.

    softmax: "full", or "sampled" with ``n_samples`` log-uniform candidates per batch (training
    only; evaluation always uses the full softmax).
    """

    def __init__(self, bilm: BiLM, softmax: str = "full", n_samples: int = 8192) -> None:
        super().__init__()
        if bilm.lm_head is None:
            raise ValueError("The biLM has no LM head (vocab_size = 0); build it with the vocabulary's size.")
        if softmax not in SOFTMAXES:
            raise ValueError(f"softmax must be one of {SOFTMAXES}, got {softmax!r}.")
        self.bilm, self.softmax, self.n_samples = bilm, softmax, n_samples
        self.sampler = LogUniformSampler(bilm.config.vocab_size) if softmax == "sampled" else None

    def forward(self, batch: TrainingBatch) -> Tuple[Tensor, Tensor]:
        """Returns (forward NLL sum, backward NLL sum), each over batch.n_targets predictions."""
        proj = self.bilm.config.projection_dim
        tokens = self.bilm.char_encoder(batch.char_ids, batch.embedding_word_ids)[batch.inverse]
        layers, _ = self.bilm.contextualize(tokens, batch.lengths)
        top = layers[-1]
        forward_hidden = F.dropout(top[batch.forward_source, :proj], self.bilm.config.dropout, self.training)
        backward_hidden = F.dropout(top[batch.backward_source, proj:], self.bilm.config.dropout, self.training)
        forward_targets = batch.word_ids[batch.forward_source + 1]
        backward_targets = batch.word_ids[batch.backward_source - 1]
        return self.nll(forward_hidden, forward_targets), self.nll(backward_hidden, backward_targets)

    def nll(self, hidden: Tensor, targets: Tensor) -> Tensor:
        if self.softmax == "sampled" and self.training:
            return sampled_nll(self.bilm.lm_head, hidden, targets, self.sampler, self.n_samples)
        return full_nll(self.bilm.lm_head, hidden, targets, chunk=0 if self.training else 2048)
