"""``BiLMRunner``: what runs a biLM for inference, made once by whoever runs it (the elmo component,
``serve``, ``embed``, a script).

A ``BiLM`` is data. A runner holds what running it needs beside the weights, decided when the
runner is made: the backend for the biLM's device and the precision asked for (``kernels.select``,
from what the machine is, never from a timing), the LSTM path and the fixed shapes, the token
cache, the CUDA graphs its backend replays and the state stateful calls carry. Another device or
precision is another runner over the same weights; a call changes nothing in the ``BiLM``. Pickled
(into a spawned worker, a Ray actor) a runner keeps what was asked and decides again where it lands.

Each sentence's layers are bitwise independent of its batch companions, in exact fp32 on GPUs too
(no TF32), with no gradients.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..kernels import advice
from ..kernels.backends import Backend, KernelChoice
from ..kernels.batch_invariant import Blocking
from ..kernels.devices import ieee_fp32
from ..kernels.lstm_steps import LstmState, check_path
from ..kernels.precision import check_precision
from ..kernels.select import select
from .bilm import BiLM, BiLMOutput, check_lengths, padding_mask
from .token_cache import TokenCache


class BiLMRunner:
    """Runs ``bilm`` for inference (see the module docstring).

    precision: "fp32" (default, exact), "bf16" or "int8" for the matmuls; ``precision`` reads
        back what runs: fp32 where the machine has no kernel for the one asked for (with one
        warning, ``kernels.advice``). lstm_path: "auto" (default: torch's fused kernel on CUDA for
        unclipped models, else the exact step loop), "step" or "fused" (unclipped models only).
    blocking: the fixed shapes of batch-invariant inference; None: the device's.
    token_cache: token representations by token string (default: 20,000 entries).
    warm: run the backend once on two short sentences, so that its probes and weight copies are
        made now and not in the first call.
    """

    def __init__(
        self,
        bilm: BiLM,
        precision: str = "fp32",
        lstm_path: str = "auto",
        blocking: Optional[Blocking] = None,
        token_cache: Optional[TokenCache] = None,
        warm: bool = True,
    ) -> None:
        check_precision(precision)
        check_path(lstm_path)
        self.bilm = bilm
        self.requested = precision
        self.lstm_path = lstm_path
        self.blocking = blocking
        self.token_cache = token_cache if token_cache is not None else TokenCache()
        self.carried_state: Optional[LstmState] = None
        self.backend = self._choose_backend()
        self.call_graphs = self.backend.call_graphs()
        if lstm_path == "fused":
            self.backend.refuse_fused(bilm.config.is_clipped, stateful=False)
        if warm:
            self._run_once()

    def _choose_backend(self) -> Backend:
        backend = select(self.bilm.device, self.requested, self.blocking)
        backend.check_fits(self.bilm)
        advice.announce(backend, self.bilm.config.kernel_shapes())
        return backend

    def _run_once(self) -> None:
        bos, eos = self.bilm.indexer.bos_token, self.bilm.indexer.eos_token
        with torch.inference_mode():
            self.contextualize(self.represent_tokens([bos, "the", eos, bos, "the", "end", eos]), [3, 4])

    def with_settings(
        self, precision: Optional[str] = None, lstm_path: Optional[str] = None, blocking: Optional[Blocking] = None
    ) -> "BiLMRunner":
        """A runner over the same weights that runs another way: ``precision``, ``lstm_path`` and
        ``blocking`` where given, else as this one; a token cache of the same bounds, and CUDA graphs
        and carried state of its own."""
        cache = TokenCache(self.token_cache.capacity, self.token_cache.max_bytes)
        return BiLMRunner(
            self.bilm,
            precision or self.requested,
            lstm_path or self.lstm_path,
            blocking or self.blocking,
            cache,
            warm=precision is not None,
        )

    def __getstate__(self) -> Dict[str, Any]:
        """What was asked, not what was chosen: the process that unpickles it may run on another
        machine, and chooses again there."""
        return {  # the token cache pickles its bounds, not its rows
            "bilm": self.bilm,
            "precision": self.requested,
            "lstm_path": self.lstm_path,
            "blocking": self.blocking,
            "token_cache": self.token_cache,
        }

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def precision(self) -> str:
        """The precision that runs (what the backend runs for the one asked for)."""
        return self.backend.runs

    @property
    def choice(self) -> KernelChoice:
        """What runs for the precision asked, through which kernel and why."""
        return self.backend.choice

    def represent_tokens(self, tokens: Sequence[str]) -> Tensor:
        """N token strings -> (N, P), as ``token_representations(*bilm.encode_tokens(tokens))``
        with the characters cut on the host: nothing in it waits for a GPU."""
        chars, words = self.bilm.indexer.encode(tokens)
        char_ids, word_ids = self.bilm.on_device(self.bilm.char_encoder.cut_characters(chars), words)
        return self.token_representations(char_ids, word_ids, already_cut=True)

    def token_representations(
        self, char_ids: Tensor, word_ids: Optional[Tensor] = None, already_cut: bool = False
    ) -> Tensor:
        """char_ids (N, C), word_ids (N,) or None -> (N, P), each token's row bitwise independent of
        the others. ``already_cut``: the character axis was cut after the longest token on the host
        (``CharEncoder.cut_characters``)."""
        self._check_device()
        with torch.no_grad(), ieee_fp32(char_ids.device):
            return self.bilm.char_encoder.represent(char_ids, word_ids, self.backend, already_cut)

    def contextualize(
        self,
        tokens: Tensor,
        lengths: Sequence[int],
        initial_state: Optional[LstmState] = None,
        path: Optional[str] = None,
    ) -> Tuple[Tensor, Optional[LstmState]]:
        """Both LSTM stacks over packed sentences, each sentence's layers bitwise independent of
        its batch companions.

        Args:
            tokens: (N, P) token representations, sentence after sentence (sentence-major).
            lengths: B sentence lengths summing to N.
            initial_state: per-sentence LSTM state to start from (stateful use); default zeros.
            path: overrides ``lstm_path`` for this call ("auto", "step" or "fused").
        Returns:
            layers (L+1, N, 2P) and, when ``initial_state`` was given, the state after each
            sentence's last token (for the next call).
        """
        check_lengths(tokens, lengths)
        self._check_device()
        stacks, path = self.bilm.stacks, path or self.lstm_path
        with torch.no_grad(), ieee_fp32(tokens.device):
            return self.backend.contextualize(stacks, tokens, lengths, initial_state, path, self.call_graphs)

    def __call__(self, char_ids: Tensor, word_ids: Optional[Tensor] = None) -> BiLMOutput:
        """Inference on a padded batch: char_ids (B, T, C), 0 at padding positions (a sentence's
        tokens first), and word ids (B, T) for models with a word embedding -> BiLMOutput."""
        mask, lengths = padding_mask(char_ids)
        words = word_ids[mask] if word_ids is not None else None
        layers, _ = self.contextualize(self.token_representations(char_ids[mask], words), lengths.tolist())
        return BiLMOutput.padded(layers, mask)

    def layers(self, sentences: Sequence[Sequence[str]], stateful: bool = False) -> Tensor:
        """All layers of a batch of sentences, on the biLM's device, boundaries included: (L+1, N,
        2P), sentence after sentence, each as its begin boundary (``<S>``, or the model's own
        ``indexer.bos_token``), its tokens, its end boundary. Token representations come from the
        token cache where it has them. ``stateful``: row i starts from the state row i of the last
        stateful call ended in (``reset_state`` forgets it)."""
        bos, eos = self.bilm.indexer.bos_token, self.bilm.indexer.eos_token
        flat = [token for sentence in sentences for token in (bos, *sentence, eos)]
        lengths = [len(sentence) + 2 for sentence in sentences]
        tokens = self.token_cache.lookup(flat, self.bilm.char_encoder, self.represent_tokens)
        start = self._carried_state(len(sentences)) if stateful else None
        layers, final = self.contextualize(tokens, lengths, initial_state=start)
        if final is not None:
            self._carry(final)
        return layers

    def reset_state(self) -> None:
        """Forget the LSTM state carried by stateful calls."""
        self.carried_state = None

    def _carried_state(self, rows: int) -> LstmState:
        carried = self.carried_state
        fresh = self.bilm.new_state(rows)
        if carried is not None:
            keep = min(rows, carried.batch_size)
            fresh.h[:, :, :keep] = carried.h[:, :, :keep]
            fresh.c[:, :, :keep] = carried.c[:, :, :keep]
        return fresh

    def _carry(self, final: LstmState) -> None:
        carried = self.carried_state
        if carried is not None and carried.batch_size > final.batch_size:
            carried.h[:, :, : final.batch_size] = final.h
            carried.c[:, :, : final.batch_size] = final.c
        else:
            self.carried_state = final

    def _check_device(self) -> None:
        if self.backend.device != self.bilm.device:
            raise RuntimeError(
                f"This runner was made for {self.backend.device}, and its biLM has moved to {self.bilm.device}: "
                "make a runner for the device it is on now (BiLMRunner(bilm, ...) or runner.with_settings())."
            )


DEFAULT_BATCH_TOKENS = 4096


def embed_sentences(
    model: Union[BiLM, BiLMRunner],
    sentences: Sequence[Sequence[str]],
    stateful: bool = False,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
) -> List[np.ndarray]:
    """Contextual layers for tokenized sentences.

    Args:
        model: a ``BiLMRunner``, or a loaded ``BiLM`` (run by an exact fp32 runner made for this
            call: its token cache lasts the call).
        sentences: lists of token strings.
        stateful: carry each row's LSTM state over from the previous stateful call (row i of
            this call continues row i of the last), as the original TensorFlow biLM did; needs a
            runner, which carries it. All sentences then run as one batch. ``runner.reset_state()``
            starts afresh.
        max_batch_tokens: tokens per batch in stateless mode; bounds memory, results do not
            depend on it.
    Returns:
        One float32 array (L+1, T_i, 2P) per sentence, boundaries removed.
    """
    if isinstance(sentences, str):
        raise TypeError("embed_sentences takes a list of sentences, each a list of token strings; got one string.")
    sentences = [_as_tokens(row, sentence) for row, sentence in enumerate(sentences)]
    if not sentences:
        return []
    if max_batch_tokens < 1:
        raise ValueError(f"max_batch_tokens must be positive, got {max_batch_tokens}.")
    runner = model if isinstance(model, BiLMRunner) else _runner_for_call(model, stateful)
    with torch.inference_mode():
        if stateful:
            return _embed_batch(runner, sentences, stateful=True)
        results: List[np.ndarray] = [None] * len(sentences)  # type: ignore[list-item]
        for batch in batches_by_length(sentences, max_batch_tokens):
            for index, layers in zip(
                batch, _embed_batch(runner, [sentences[i] for i in batch], stateful=False), strict=True
            ):
                results[index] = layers
        return results


def split_sentences(layers: Any, lengths: Sequence[int]) -> List[Any]:
    """(L+1, N, 2P) from ``BiLMRunner.layers`` -> one (L+1, T_i, 2P) view per sentence, boundaries
    removed; ``lengths`` are the sentences' token counts without boundaries."""
    results, offset = [], 0
    for length in lengths:
        results.append(layers[:, offset + 1 : offset + length + 1])
        offset += length + 2
    return results


def reset_state(runner: BiLMRunner) -> None:
    """Forget the LSTM state that ``runner``'s stateful calls carry (``runner.reset_state()``)."""
    runner.reset_state()


def _runner_for_call(bilm: BiLM, stateful: bool) -> BiLMRunner:
    if stateful:
        raise TypeError(
            "Stateful calls carry LSTM state from call to call, which a runner keeps: runner = BiLMRunner(bilm), "
            "then embed_sentences(runner, sentences, stateful=True)."
        )
    return BiLMRunner(bilm, warm=False)


def _embed_batch(runner: BiLMRunner, sentences: Sequence[Sequence[str]], stateful: bool) -> List[np.ndarray]:
    host = runner.layers(sentences, stateful).float().cpu().numpy()
    return [np.ascontiguousarray(part) for part in split_sentences(host, [len(s) for s in sentences])]


def batches_by_length(sentences: Sequence[Sequence[str]], max_batch_tokens: int) -> Iterator[List[int]]:
    """Indices of sentences in batches of similar length, each within the token budget (boundary
    tokens included; nothing is padded). A sentence longer than the budget runs alone."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]), reverse=True)
    batch: List[int] = []
    total = 0
    for index in order:
        length = len(sentences[index]) + 2
        if batch and total + length > max_batch_tokens:
            yield batch
            batch, total = [], 0
        batch.append(index)
        total += length
    if batch:
        yield batch


def _as_tokens(row: int, sentence: Sequence[str]) -> List[str]:
    if isinstance(sentence, str):
        raise TypeError(
            f"Sentence {row} is a string ({sentence[:40]!r}); pass it as a list of tokens, e.g. text.split()."
        )
    tokens = list(sentence)
    for token in tokens:
        if not isinstance(token, str):
            raise TypeError(
                f"Sentence {row} holds a {type(token).__name__} ({token!r}); sentences must be lists of token strings."
            )
    return tokens
