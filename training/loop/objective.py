"""The paper's pretraining objective: the log likelihood of a forward and a backward language model
that share the token representation and the softmax but keep separate LSTMs; and the perplexity
it amounts to on held-out batches."""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spacy_elmo.choices import choose
from spacy_elmo.network.bilm import BiLM

from .batching import TrainingBatch
from .softmax import SOFTMAXES, full_nll


class LanguageModelLoss(nn.Module):
    """BiLM with an LM head -> summed NLL of the forward and of the backward predictions.

    softmax: a name in ``spacy_elmo.training.loop.softmax.SOFTMAXES``: "full", or "sampled" with ``n_samples``
    log-uniform candidates per batch (training only; evaluation always uses the full softmax).
    """

    def __init__(self, bilm: BiLM, softmax: str = "full", n_samples: int = 8192) -> None:
        super().__init__()
        if bilm.lm_head is None:
            raise ValueError("The biLM has no LM head (vocab_size = 0); build it with the vocabulary's size.")
        self.training_nll = choose(SOFTMAXES, "softmax", softmax)(bilm.config.vocab_size, n_samples)
        self.bilm, self.softmax, self.n_samples = bilm, softmax, n_samples

    def forward(self, batch: TrainingBatch) -> Tuple[Tensor, Tensor]:
        """Returns (forward NLL sum, backward NLL sum), each over batch.n_targets predictions."""
        proj = self.bilm.config.projection_dim
        tokens = self.bilm.char_encoder(batch.char_ids, batch.embedding_word_ids)[batch.inverse]
        layers = self.bilm.contextualize_for_training(tokens, batch.lengths)
        top = layers[-1]
        forward_hidden = F.dropout(top[batch.forward_source, :proj], self.bilm.config.dropout, self.training)
        backward_hidden = F.dropout(top[batch.backward_source, proj:], self.bilm.config.dropout, self.training)
        forward_targets = batch.word_ids[batch.forward_source + 1]
        backward_targets = batch.word_ids[batch.backward_source - 1]
        return self.nll(forward_hidden, forward_targets), self.nll(backward_hidden, backward_targets)

    def nll(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """hidden (M, P), targets (M,) -> summed NLL: the configured softmax in training, else the
        full one (its logits computed 2048 rows at a time)."""
        if self.training:
            return self.training_nll(self.bilm.lm_head, hidden, targets)
        return full_nll(self.bilm.lm_head, hidden, targets, chunk=2048)


@torch.no_grad()
def perplexity(loss_module: LanguageModelLoss, batches: List[TrainingBatch], device: torch.device) -> Dict[str, float]:
    """Full-softmax perplexity: forward, backward and their average (exp of the mean NLL of both)."""
    was_training = loss_module.training
    loss_module.eval()
    forward = backward = targets = 0.0
    for batch in batches:
        nll_forward, nll_backward = loss_module(batch.to(device))
        forward, backward, targets = (
            forward + float(nll_forward),
            backward + float(nll_backward),
            targets + batch.n_targets,
        )
    loss_module.train(was_training)
    return {
        "forward": math.exp(forward / targets),
        "backward": math.exp(backward / targets),
        "average": math.exp((forward + backward) / (2 * targets)),
        "targets": int(targets),
    }
