"""The biLM of Peters et al. (2018) as torch modules.

token strings -> ``TokenIndexer`` (chars.py) -> char ids (B, T, C) [+ word ids (B, T)] ->
``CharEncoder`` (char_encoder.py) -> token representations (N, P) for the N real tokens ->
forward and backward stacks of ``LstmLayer`` (lstm_layer.py; separate weights, residual between
layers, run as ``lstm_paths`` chooses) ->
layers (L+1, B, T, 2P): layer 0 is the token representation repeated for both directions.

Two ways through the network, each named by its caller: inference (``token_representations``,
``contextualize``, ``forward``) runs the model's ``Kernels``, so a sentence's layers are bitwise
identical whatever its batch companions, and computes no gradients; training
(``char_encoder(...)``, ``contextualize_for_training``, ``forward_for_training``) runs the usual
autograd-friendly kernels, in pretraining and in its dev perplexity alike.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kernels import advice
from ..kernels.batch_invariant import Blocking
from ..kernels.cuda_math import ieee_fp32
from ..kernels.devices import upload
from ..kernels.kernel_set import KernelChoice, Kernels
from ..kernels.precision import check_precision
from ..kernels.select import check_int8_fits, select
from .backends import Backend, backend_for
from .char_encoder import CharEncoder
from .chars import CharTable, TokenIndexer
from .config import BiLMConfig, ConfigError
from .gpu_graphs import CallGraphs
from .lstm_layer import LayerState, LstmLayer, LstmState
from .lstm_paths import LayerRunner, check_path, refuse_fused, training_runner
from .token_cache import TokenCache


class LMHead(nn.Module):
    """Softmax over the word vocabulary, shared by both directions: (M, P) -> logits (M, V)."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.weight, std=dim**-0.5)  # skipped on the meta device (weights.native)

    def forward(self, hidden: Tensor) -> Tensor:
        return F.linear(hidden, self.weight, self.bias)


@dataclass
class BiLMOutput:
    """layers: (L+1, B, T, 2P), zero at padding positions; mask: (B, T) bool, True for tokens."""

    layers: Tensor
    mask: Tensor


class BiLM(nn.Module):
    """The bidirectional language model. See the module docstring for the data flow.

    How it runs is fixed for a BiLM object (not saved with the weights); ``with_settings`` gives
    another BiLM over the same weights that runs another way, with its own kernels and caches:
        precision: "fp32" (default, exact), "bf16" or "int8" for inference matmuls (see
            ``precision``); reads back what runs, which is fp32 where the machine has no kernel for
            the precision asked. ``kernels`` (``kernels.select``) are chosen once for it: at
            ``with_settings``, at its first call for fp32, and again when its weights move to
            another device.
        lstm_path: "auto" (default: the fused kernel on CUDA for unclipped models, else the exact
            step loop), "step" or "fused" (unclipped models only).
        blocking: the fixed shapes of batch-invariant inference; None picks them for the device.
    Its own state:
        token_cache: token representations by token string (``TokenCache``); valid for word
            embeddings too, since a token's word id is a function of its string.
        carried_state: the LSTM state stateful ``embed_sentences`` calls carry from call to call.
        cuda_graphs: the CUDA graphs that calls on a GPU replay (``gpu_graphs``); None
            launches every kernel (the same results).
    """

    def __init__(self, config: BiLMConfig, indexer: Optional[TokenIndexer] = None) -> None:
        """``indexer`` maps token strings to ids; needed for models with their own vocabulary
        (``config.needs_vocabulary``), the original byte mapping otherwise."""
        super().__init__()
        self.config = config
        proj = config.projection_dim
        self.indexer = checked_indexer(config, indexer)
        self.char_encoder = CharEncoder(config, pad_id=self.indexer.chars.pad_id)
        self.forward_layers = nn.ModuleList(LstmLayer(proj, config) for _ in range(config.n_layers))
        self.backward_layers = nn.ModuleList(LstmLayer(proj, config) for _ in range(config.n_layers))
        self.lm_head = LMHead(config.vocab_size, proj) if config.vocab_size else None
        self._lstm_path = "auto"
        self._blocking: Optional[Blocking] = None
        self.token_cache = TokenCache()
        self.carried_state: Optional[LstmState] = None
        self.kernels: Optional[Kernels] = None
        self._requested = "fp32"  # the precision asked for: its kernels are chosen again after unpickling
        self.cuda_graphs: Optional[CallGraphs] = CallGraphs()

    @property
    def device(self) -> torch.device:
        return self.char_encoder.projection.weight.device

    @property
    def precision(self) -> str:
        """The precision that runs (what ``kernels`` run for the one asked for)."""
        return self.kernels.runs if self.kernels is not None else "fp32"

    @precision.setter
    def precision(self, value: str) -> None:
        _refuse_setting("precision", value)

    @property
    def lstm_path(self) -> str:
        """The LSTM path asked for ("auto", "step" or "fused")."""
        return self._lstm_path

    @lstm_path.setter
    def lstm_path(self, value: str) -> None:
        _refuse_setting("lstm_path", value)

    @property
    def blocking(self) -> Optional[Blocking]:
        """The fixed shapes of batch-invariant inference (None: the device's)."""
        return self._blocking

    @blocking.setter
    def blocking(self, value: Optional[Blocking]) -> None:
        _refuse_setting("blocking", value)

    def with_settings(
        self, precision: Optional[str] = None, lstm_path: Optional[str] = None, blocking: Optional[Blocking] = None
    ) -> "BiLM":
        """This biLM's weights (shared, not copied) run another way: ``precision``, ``lstm_path``,
        ``blocking`` where given, else as this one runs, with a token cache of the same bounds,
        CUDA graphs and carried state of its own. Where a precision is given, what runs is selected
        for it on this device from what the machine is (``kernels.select``), with one warning
        where it falls back or is no faster than fp32 here (``kernels.advice``), and the kernels
        run once on two short sentences, so that their probes and weight copies are made now and
        not in the first call."""
        if precision is not None:
            check_precision(precision)
        if lstm_path is not None:
            check_path(lstm_path)
        view = copy.copy(self)  # __getstate__: the same modules and parameters, no kernels
        view.kernels = self.kernels
        view.token_cache = TokenCache(self.token_cache.capacity, self.token_cache.max_bytes)
        view.carried_state = None
        view.cuda_graphs = CallGraphs(self.cuda_graphs.most, self.cuda_graphs.most_bytes) if self.cuda_graphs else None
        view._lstm_path = lstm_path or self._lstm_path
        view._blocking = blocking or self._blocking
        if precision is not None:
            view._choose_kernels(precision, warm=False)
        if view._lstm_path == "fused" and view.kernels is not None:
            refuse_fused(view.config, view.kernels, stateful=False)
        if precision is not None:
            view._run_kernels_once()
        return view

    def _choose_kernels(self, precision: str, warm: bool) -> None:
        kernels = select(self.device, precision)
        self._requested = precision
        if kernels.runs == "int8":
            check_int8_fits(self)
        advice.announce(kernels, self.config.kernel_shapes())
        self.kernels = kernels
        self.token_cache.clear()  # rows computed by other kernels, or on another device
        if warm:
            self._run_kernels_once()

    def _apply(self, fn: Any, recurse: bool = True) -> "BiLM":
        """torch moves or converts the weights (``.to``, ``.cuda``): the kernels are chosen again
        for the device they are on now."""
        moved = super()._apply(fn, recurse)
        if self.kernels is not None and self.kernels.device != self.device:
            self._choose_kernels(self._requested, warm=False)
        return moved

    def __getstate__(self) -> Dict[str, Any]:
        """Pickled (into a spawned worker, say) without its kernels, with the precision asked for:
        the process that unpickles it may run on another machine, so they are selected again there,
        at its first call."""
        state = dict(self.__dict__)
        state.update(kernels=None)
        return state

    @property
    def precision_choice(self) -> Optional[KernelChoice]:
        """What runs for the precision asked, through which kernel and why (None before one is set)."""
        return self.kernels.choice if self.kernels is not None else None

    def kernels_for_run(self) -> Kernels:
        """The kernels of this call: ``kernels`` on ``blocking``'s sizes where one is set; chosen at
        the first call where none were chosen before (fp32's, or after unpickling the precision's
        asked for); chosen again where another BiLM over the same weights moved them to another
        device."""
        if self.kernels is None or self.kernels.device != self.device:
            self._choose_kernels(self._requested, warm=False)
        assert self.kernels is not None  # chosen just now where there were none
        return self.kernels.with_blocking(self._blocking)

    def backend_for_run(self) -> Backend:
        """How this call computes (``backends``): over ``kernels_for_run``."""
        return backend_for(self.kernels_for_run())

    def _run_kernels_once(self) -> None:
        bos, eos = self.indexer.bos_token, self.indexer.eos_token
        strings = [bos, "the", eos, bos, "the", "end", eos]
        with torch.inference_mode():
            self.contextualize(self.represent_tokens(strings), [3, 4])

    def encode_tokens(self, tokens: Sequence[str]) -> Tuple[Tensor, Optional[Tensor]]:
        """N token strings -> (char ids (N, C), word ids (N,) or None), long, on the bilm's device."""
        return self._on_device(*self.indexer.encode(tokens))

    def represent_tokens(self, tokens: Sequence[str]) -> Tensor:
        """Inference: N token strings -> (N, P), as ``token_representations(*encode_tokens(tokens))``
        with the characters cut on the host: nothing in it waits for a GPU."""
        chars, words = self.indexer.encode(tokens)
        char_ids, word_ids = self._on_device(self.char_encoder.cut_characters(chars), words)
        return self.token_representations(char_ids, word_ids, already_cut=True)

    def _on_device(self, chars: np.ndarray, words: Optional[np.ndarray]) -> Tuple[Tensor, Optional[Tensor]]:
        """Char ids (N, C) and word ids (N,) or None from the host, long, on the bilm's device."""
        word_ids = upload(torch.from_numpy(words), self.device) if words is not None else None
        return upload(torch.from_numpy(chars), self.device, torch.long), word_ids

    def forward(self, char_ids: Tensor, word_ids: Optional[Tensor] = None) -> BiLMOutput:
        """Inference on a padded batch: char_ids (B, T, C), 0 at padding positions (a sentence's
        tokens first), and word ids (B, T) for models with a word embedding -> BiLMOutput."""
        return self._padded(char_ids, word_ids, training=False)

    def forward_for_training(self, char_ids: Tensor, word_ids: Optional[Tensor] = None) -> BiLMOutput:
        """``forward`` through the differentiable path (``contextualize_for_training``)."""
        return self._padded(char_ids, word_ids, training=True)

    def _padded(self, char_ids: Tensor, word_ids: Optional[Tensor], training: bool) -> BiLMOutput:
        mask = char_ids.gt(0).any(dim=-1)
        lengths = mask.sum(dim=1)
        if not torch.equal(mask, _prefix_mask(lengths, mask.shape[1])):
            raise ValueError(
                "char_ids must hold each sentence's tokens first and padding (all-zero rows) after; "
                "found a padding position before a token."
            )
        words = word_ids[mask] if word_ids is not None else None
        if training:
            layers = self.contextualize_for_training(self.char_encoder(char_ids[mask], words), lengths.tolist())
        else:
            layers, _ = self.contextualize(self.token_representations(char_ids[mask], words), lengths.tolist())
        padded = layers.new_zeros(layers.shape[0], *mask.shape, layers.shape[-1])
        padded[:, mask] = layers
        return BiLMOutput(layers=padded, mask=mask)

    def token_representations(
        self, char_ids: Tensor, word_ids: Optional[Tensor] = None, already_cut: bool = False
    ) -> Tensor:
        """Inference: char_ids (N, C), word_ids (N,) or None -> (N, P), each token's row bitwise
        independent of the others (the differentiable path is ``char_encoder(...)``). ``already_cut``: the
        character axis was cut after the longest token on the host (``CharEncoder.cut_characters``),
        so a GPU does not cut it again (finding the longest token there waits for the GPU)."""
        with torch.no_grad(), ieee_fp32(char_ids.device):
            return self.backend_for_run().represent(self.char_encoder, char_ids, word_ids, already_cut)

    def contextualize(
        self,
        tokens: Tensor,
        lengths: Sequence[int],
        initial_state: Optional[LstmState] = None,
        path: Optional[str] = None,
    ) -> Tuple[Tensor, Optional[LstmState]]:
        """Inference: both LSTM stacks over packed sentences, each sentence's layers bitwise
        independent of its batch companions, in exact fp32 on GPUs too (no TF32); no gradients.

        Args:
            tokens: (N, P) token representations, sentence after sentence (sentence-major).
            lengths: B sentence lengths summing to N.
            initial_state: per-sentence LSTM state to start from (stateful use); default zeros.
            path: overrides ``self.lstm_path`` for this call ("auto", "step" or "fused").
        Returns:
            layers (L+1, N, 2P) and, when ``initial_state`` was given, the state after each
            sentence's last token (for the next call).
        """
        _check_lengths(tokens, lengths)
        with torch.no_grad(), ieee_fp32(tokens.device):
            return self.backend_for_run().contextualize(self, tokens, lengths, initial_state, path or self._lstm_path)

    def contextualize_for_training(self, tokens: Tensor, lengths: Sequence[int]) -> Tensor:
        """Training (and its evaluation): the differentiable path, with dropout in train mode and
        TF32 where the process allows it. tokens (N, P), B lengths -> layers (L+1, N, 2P)."""
        _check_lengths(tokens, lengths)
        run = training_runner(list(lengths), tokens.device)
        layers, _ = self.run_stacks(run, tokens, None, dropout=self.training)
        return layers

    def run_stacks(
        self, run: LayerRunner, tokens: Tensor, initial_state: Optional[LstmState], dropout: bool
    ) -> Tuple[Tensor, Optional[LstmState]]:
        """Both stacks through ``run``, the residual between layers: layers (L+1, N, 2P) and the
        final state where ``initial_state`` was given."""
        outputs: Dict[Tuple[str, int], Tensor] = {}
        finals: Dict[Tuple[str, int], Optional[LayerState]] = {}
        for direction, stack in (("forward", self.forward_layers), ("backward", self.backward_layers)):
            x = tokens
            for depth, layer in enumerate(cast("Iterable[LstmLayer]", stack)):
                start = initial_state.layer(direction, depth) if initial_state is not None else None
                x_in = F.dropout(x, self.config.dropout, dropout)
                y, finals[direction, depth] = run(layer, x_in, direction, start)
                if self.config.residual and depth > 0:
                    y = y + x_in
                outputs[direction, depth] = x = y
        layers = [torch.cat([tokens, tokens], dim=1)]
        for depth in range(self.config.n_layers):
            layers.append(torch.cat([outputs["forward", depth], outputs["backward", depth]], dim=1))
        # With a start state every runner returns the layer's final state (the step loop: see inference_runner).
        complete = cast("Dict[Tuple[str, int], LayerState]", finals)
        final_state = LstmState.from_layers(complete, self.config.n_layers) if initial_state is not None else None
        return torch.stack(layers), final_state

    def new_state(self, batch_size: int) -> LstmState:
        """A zero LSTM state for ``batch_size`` sentences (stateful runs)."""
        return LstmState.zeros(
            self.config.n_layers,
            batch_size,
            self.config.projection_dim,
            self.config.lstm_dim,
            self.device,
            self.char_encoder.projection.weight.dtype,
        )

    def parameter_count(self, include_lm_head: bool = False) -> int:
        skip = set() if include_lm_head or self.lm_head is None else {id(p) for p in self.lm_head.parameters()}
        return sum(p.numel() for p in self.parameters() if id(p) not in skip)


def checked_indexer(config: BiLMConfig, indexer: Optional[TokenIndexer]) -> TokenIndexer:
    """``indexer`` (default: the byte mapping) after checking that it fits ``config``'s sizes."""
    if indexer is None:
        if config.needs_vocabulary:
            raise ConfigError(
                f"This biLM config (char_vocabulary={config.char_vocabulary!r}, word_dim={config.word_dim}) reads "
                "tokens through its own vocabulary: pass BiLM(config, indexer=TokenIndexer(...)), or load the "
                "model with load_bilm / import_efml, which read it."
            )
        indexer = TokenIndexer()
    chars, words = indexer.chars, indexer.words
    if chars.kind != config.char_vocabulary:
        raise ConfigError(
            f"The indexer encodes characters as {chars.kind!r}, the config says {config.char_vocabulary!r}."
        )
    if isinstance(chars, CharTable) and (
        chars.n_characters > config.n_characters or chars.max_length != config.max_characters_per_token
    ):
        raise ConfigError(
            f"The char table needs {chars.n_characters} embedding rows and {chars.max_length} chars per token; "
            f"the config has n_characters={config.n_characters}, "
            f"max_characters_per_token={config.max_characters_per_token}."
        )
    if (words is not None) != (config.word_dim > 0):
        raise ConfigError(
            f"The config's word_dim is {config.word_dim} but the indexer {'has' if words else 'has no'} word table."
        )
    if words is not None and words.size > config.word_vocab_size:
        raise ConfigError(
            f"The word table needs {words.size} embedding rows; the config has "
            f"word_vocab_size={config.word_vocab_size}."
        )
    return indexer


def _check_lengths(tokens: Tensor, lengths: Sequence[int]) -> None:
    if sum(lengths) != tokens.shape[0]:
        raise ValueError(f"lengths sum to {sum(lengths)} but {tokens.shape[0]} tokens were given.")


def _prefix_mask(lengths: Tensor, width: int) -> Tensor:
    return torch.arange(width, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def _refuse_setting(name: str, value: Any) -> None:
    raise AttributeError(
        f"A BiLM's {name} is fixed when it is made: bilm = bilm.with_settings({name}={value!r}) gives a BiLM over "
        "the same weights that runs that way (its own kernels and caches)."
    )
