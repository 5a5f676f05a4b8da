"""Negative log likelihood of next-word predictions through the LM head (shared by both directions).

- ``full_nll``: the exact softmax over the whole vocabulary (small vocabularies, and always for
  perplexity).
- ``sampled_nll``: sampled softmax (Jean et al., 2015) with the log-uniform (Zipfian) sampler of
  the original biLM: one set of candidates per batch, logits corrected by the log of each
  candidate's expected count, accidental hits removed.

``SOFTMAXES`` names the ones training can use (``TrainConfig.softmax``).
"""

from __future__ import annotations

import math
from typing import Callable, Dict

import torch
import torch.nn.functional as F
from torch import Tensor

from spacy_elmo.network.bilm import LMHead


def full_nll(head: LMHead, hidden: Tensor, targets: Tensor, chunk: int = 0) -> Tensor:
    """Summed NLL. hidden (M, P), targets (M,) -> scalar. ``chunk`` > 0 bounds the logits held at
    once (for evaluation without gradients)."""
    if chunk <= 0 or hidden.shape[0] <= chunk:
        return F.cross_entropy(head(hidden).float(), targets, reduction="sum")
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk):
        total = total + F.cross_entropy(
            head(hidden[start : start + chunk]).float(), targets[start : start + chunk], reduction="sum"
        )
    return total


class LogUniformSampler:
    """P(k) = log((k + 2) / (k + 1)) / log(V + 1) over ids sorted by falling frequency."""

    def __init__(self, vocab_size: int, device=None) -> None:
        ids = torch.arange(vocab_size, dtype=torch.float64, device=device)
        probs = (torch.log(ids + 2) - torch.log(ids + 1)) / math.log(vocab_size + 1)
        self.probs = probs.float()
        self.log_probs = torch.log(probs).float()

    def sample(self, n_samples: int) -> Tensor:
        """n_samples ids drawn with replacement from the default torch generator."""
        return torch.multinomial(self.probs, n_samples, replacement=True)


def sampled_nll(head: LMHead, hidden: Tensor, targets: Tensor, sampler: LogUniformSampler, n_samples: int) -> Tensor:
    """Summed sampled-softmax NLL. hidden (M, P), targets (M,) -> scalar."""
    candidates = sampler.sample(n_samples).to(targets.device)  # (K,)
    log_expected = math.log(n_samples) + sampler.log_probs.to(targets.device)
    true_logits = (hidden * head.weight[targets]).sum(-1) + head.bias[targets] - log_expected[targets]
    sampled_logits = hidden @ head.weight[candidates].t() + head.bias[candidates] - log_expected[candidates]
    accidental = candidates.unsqueeze(0) == targets.unsqueeze(1)
    sampled_logits = sampled_logits.masked_fill(accidental, float("-inf"))
    logits = torch.cat([true_logits.unsqueeze(1), sampled_logits], dim=1).float()
    return -F.log_softmax(logits, dim=1)[:, 0].sum()


# The NLL that training minimizes: (head, hidden (M, P), targets (M,)) -> summed NLL, a scalar.
TrainingNll = Callable[[LMHead, Tensor, Tensor], Tensor]


def _full_softmax(vocab_size: int, n_samples: int) -> TrainingNll:
    return full_nll


def _sampled_softmax(vocab_size: int, n_samples: int) -> TrainingNll:
    sampler = LogUniformSampler(vocab_size)
    return lambda head, hidden, targets: sampled_nll(head, hidden, targets, sampler, n_samples)


# name -> (vocab_size, n_samples) -> the training NLL.
SOFTMAXES: Dict[str, Callable[[int, int], TrainingNll]] = {"full": _full_softmax, "sampled": _sampled_softmax}
