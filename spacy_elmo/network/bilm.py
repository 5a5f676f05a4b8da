"""The biLM of Peters et al. (2018) as torch modules.

token strings -> ``TokenIndexer`` (chars.py) -> char ids (B, T, C) [+ word ids (B, T)] ->
CharEncoder -> token representations (N, P) for the N real tokens ->
forward and backward LSTM stacks (separate weights, residual between layers) ->
layers (L+1, B, T, 2P): layer 0 is the token representation repeated for both directions.

Two ways through the network: under ``torch.no_grad()`` / ``torch.inference_mode()`` every kernel
runs on fixed shapes (see ``batch_invariant``), so a sentence's layers are bitwise identical
whatever its batch companions; with gradients enabled, the usual autograd-friendly kernels run
(pretraining).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kernels import kernel_choice
from ..kernels.batch_invariant import Blocking, elementwise_, linear_rows, rows_any_count
from . import recurrence
from .chars import CHAR_PAD, CharTable, TokenIndexer
from .config import BiLMConfig, ConfigError
from .recurrence import LanePlan, LstmState, PackedOrder
from .token_cache import TokenCache


class Highway(nn.Module):
    """y = g * relu(x W_t + b_t) + (1 - g) * x with g = sigmoid(x W_g + b_g); (N, F) -> (N, F)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        gate = torch.sigmoid(self.gate(x))
        return gate * torch.relu(self.transform(x)) + (1 - gate) * x

    def forward_invariant(self, x: Tensor, rows: int, precision: str = "fp32") -> Tensor:
        gate = elementwise_(Tensor.sigmoid_, linear_rows(x, self.gate.weight, self.gate.bias, rows, precision))
        transform = linear_rows(x, self.transform.weight, self.transform.bias, rows, precision).relu_()
        return gate * transform + (1 - gate) * x


def embedding(count: int, dim: int, padding_idx: Optional[int] = None) -> nn.Embedding:
    """``nn.Embedding(count, dim, padding_idx)``, initialized as torch initializes it except on the
    meta device (a module built to receive loaded weights): there torch's ``normal_`` imports
    sympy, measured at 0.8 s and 70 MB resident, for values the load replaces."""
    weight = torch.empty(count, dim)
    if not weight.is_meta:
        with torch.no_grad():
            nn.init.normal_(weight)
            if padding_idx is not None:
                weight[padding_idx] = 0
    return nn.Embedding(count, dim, padding_idx=padding_idx, _weight=weight)


class CharEncoder(nn.Module):
    """Context-independent token representation: char ids (N, C) [+ word ids (N,)] -> (N, P).

    Char embedding, one convolution per filter width, max over positions, activation, highway
    layers; with a word embedding (``config.word_dim`` > 0), ``[word vector; highway output]`` (the
    order of ELMoForManyLangs); then a linear projection. Characters after a token's end are
    trimmed before the convolutions: windows made only of the pad character (``pad_id``) all give
    the same value, which is added back to the max exactly.
    """

    def __init__(self, config: BiLMConfig, pad_id: int = CHAR_PAD) -> None:
        super().__init__()
        self.config = config
        self.pad_id = pad_id
        n_filters, dim = config.n_filters, config.char_embedding_dim
        self.embedding = embedding(config.n_characters, dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(dim, count, width) for width, count in config.filters)
        self.highways = nn.ModuleList(Highway(n_filters) for _ in range(config.n_highway))
        self.projection = nn.Linear(config.word_dim + n_filters, config.projection_dim)
        self.word_embedding = embedding(config.word_vocab_size, config.word_dim) if config.word_dim else None
        self._activation = torch.relu if config.activation == "relu" else torch.tanh

    def forward(self, char_ids: Tensor, word_ids: Optional[Tensor] = None) -> Tensor:
        """Differentiable path. char_ids (N, C), word_ids (N,) or None -> (N, P)."""
        self._check_word_ids(word_ids)
        ids, trimmed = self._trim(char_ids)
        chars = self.embedding(ids).transpose(1, 2)  # (N, E, C')
        pad_windows = self._pad_windows() if trimmed else None
        features = []
        for index, conv in enumerate(self.convs):
            best = F.conv1d(chars, conv.weight).amax(dim=2)  # (N, F_w)
            if pad_windows is not None:
                best = torch.maximum(best, pad_windows[index])
            features.append(self._activation(best + conv.bias))
        x = torch.cat(features, dim=1)
        for highway in self.highways:
            x = highway(x)
        if word_ids is not None:
            x = torch.cat([self.word_embedding(word_ids), x], dim=1)
        return self.projection(x)

    @torch.no_grad()
    def forward_invariant(self, char_ids: Tensor, blocking: Blocking, word_ids: Optional[Tensor] = None) -> Tensor:
        """Batch-invariant path: a token's representation is bitwise independent of the others.
        Tokens run in blocks of ``blocking.token_block``, the last padded to a whole block; where
        matmul rows do not depend on the row count, in blocks of ``blocking.token_block_any_rows``,
        the last padded only to a multiple of 32 tokens (whole SIMD blocks for the elementwise
        functions). char_ids (N, C), word_ids (N,) or None -> (N, P)."""
        self._check_word_ids(word_ids)
        any_rows = rows_any_count(char_ids.device, blocking.precision)
        block = blocking.token_block_any_rows if any_rows else blocking.token_block
        pad_to = 32 if any_rows else block
        n_tokens = char_ids.shape[0]
        out = char_ids.new_empty((n_tokens, self.config.projection_dim), dtype=self.projection.weight.dtype)
        pad_windows = self._pad_windows(blocking.gemm_rows, blocking.precision)
        for start in range(0, n_tokens, block):
            ids = char_ids[start : start + block]
            words = word_ids[start : start + block] if word_ids is not None else None
            missing = -ids.shape[0] % pad_to
            if missing:
                ids = torch.cat([ids, ids.new_full((missing, ids.shape[1]), self.pad_id)])
                words = torch.cat([words, words.new_zeros(missing)]) if words is not None else None
            encoded = self._encode_block(ids, words, pad_windows, blocking.gemm_rows, blocking.precision)
            out[start : start + block] = encoded[: n_tokens - start]
        return out

    def _encode_block(
        self, char_ids: Tensor, word_ids: Optional[Tensor], pad_windows: List[Tensor], rows: int, precision: str
    ) -> Tensor:
        """One block of tokens: char_ids (n, C), word_ids (n,) or None -> (n, P). The highway and
        projection GEMMs take the whole block (a fixed shape already); the convolution windows go
        in ``rows`` chunks."""
        ids, trimmed = self._trim(char_ids)
        chars = self.embedding(ids)  # (n, C', E)
        n_tokens = chars.shape[0]
        features = []
        for index, conv in enumerate(self.convs):
            width = conv.kernel_size[0]
            windows = chars.unfold(1, width, 1)  # (n, C'-w+1, E, w)
            n_windows = windows.shape[1]
            flat = windows.reshape(n_tokens * n_windows, -1)
            scores = linear_rows(flat, conv.weight.reshape(conv.out_channels, -1), None, rows, precision)
            best = scores.view(n_tokens, n_windows, -1).amax(dim=1)
            if trimmed:
                best = torch.maximum(best, pad_windows[index])
            best += conv.bias
            features.append(best.relu_() if self.config.activation == "relu" else elementwise_(Tensor.tanh_, best))
        x = torch.cat(features, dim=1)
        for highway in self.highways:
            x = highway.forward_invariant(x, n_tokens, precision)
        if word_ids is not None:
            x = torch.cat([self.word_embedding(word_ids), x], dim=1)
        return linear_rows(x, self.projection.weight, self.projection.bias, n_tokens, precision)

    def _check_word_ids(self, word_ids: Optional[Tensor]) -> None:
        if self.word_embedding is None and word_ids is not None:
            raise ValueError("Word ids were given, but this biLM has no word embedding (word_dim = 0); pass None.")
        if self.word_embedding is not None and word_ids is None:
            raise ValueError(
                f"This biLM has a word embedding (word_dim = {self.config.word_dim}) and needs word ids "
                "beside the char ids: get both from bilm.encode_tokens(strings)."
            )

    def _trim(self, char_ids: Tensor) -> Tuple[Tensor, bool]:
        """Cut the character axis after the longest token plus (widest filter - 1) pads, so that
        every window touching a real character is kept. Returns (ids (N, C'), whether cut)."""
        n_chars = char_ids.shape[1]
        real = (char_ids != self.pad_id) & (char_ids != 0)
        longest = int(real.any(dim=0).nonzero().max()) + 1 if bool(real.any()) else 0
        widest = max(width for width, _ in self.config.filters)
        keep = min(n_chars, max(longest + widest - 1, widest))
        return char_ids[:, :keep], keep < n_chars

    def _pad_windows(self, rows: Optional[int] = None, precision: str = "fp32") -> List[Tensor]:
        """Each convolution's scores (without bias) on a window of padding characters only;
        with ``rows``, computed by the same fixed-shape kernel as the real windows."""
        pad = self.embedding.weight[self.pad_id]  # (E,)
        values = []
        for conv in self.convs:
            width = conv.kernel_size[0]
            window = pad.unsqueeze(1).expand(-1, width).reshape(1, -1)  # (1, E*w) in (E, w) order
            weight = conv.weight.reshape(conv.out_channels, -1)
            if rows is None:
                values.append((window @ weight.t())[0])
            else:
                values.append(linear_rows(window, weight, None, rows, precision)[0])
        return values


class LstmLayer(nn.Module):
    """One LSTM layer of one direction, with projection and optional clipping.

    Parameters in PyTorch's gate order (input, forget, cell, output) and shapes, with a single
    bias (the original has one): weight_ih (4H, I), weight_hh (4H, P), bias (4H,), weight_hr (P, H).
    """

    def __init__(self, input_dim: int, config: BiLMConfig) -> None:
        super().__init__()
        cells, proj = config.lstm_dim, config.projection_dim
        self.weight_ih = nn.Parameter(torch.empty(4 * cells, input_dim))
        self.weight_hh = nn.Parameter(torch.empty(4 * cells, proj))
        self.bias = nn.Parameter(torch.empty(4 * cells))
        self.weight_hr = nn.Parameter(torch.empty(proj, cells))
        self.cell_clip = config.cell_clip
        self.proj_clip = config.proj_clip
        self.reset_parameters()

    @property
    def cells(self) -> int:
        return self.weight_hr.shape[1]

    @property
    def projection_dim(self) -> int:
        return self.weight_hr.shape[0]

    @property
    def is_clipped(self) -> bool:
        return self.cell_clip is not None or self.proj_clip is not None

    def reset_parameters(self) -> None:
        bound = self.cells**-0.5
        for weight in (self.weight_ih, self.weight_hh, self.weight_hr):
            nn.init.uniform_(weight, -bound, bound)
        with torch.no_grad():
            self.bias.zero_()
            self.bias[self.cells : 2 * self.cells] = 1.0  # forget gate open at the start


class LMHead(nn.Module):
    """Softmax over the word vocabulary, shared by both directions: (M, P) -> logits (M, V)."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        if not self.weight.is_meta:  # see ``embedding``
            nn.init.normal_(self.weight, std=dim**-0.5)

    def forward(self, hidden: Tensor) -> Tensor:
        return F.linear(hidden, self.weight, self.bias)


@dataclass
class BiLMOutput:
    """layers: (L+1, B, T, 2P), zero at padding positions; mask: (B, T) bool, True for tokens."""

    layers: Tensor
    mask: Tensor


class BiLM(nn.Module):
    """The bidirectional language model. See the module docstring for the data flow.

    Run-time settings (not saved with the weights):
        lstm_path: "auto" (default: the fused kernel on CUDA for unclipped models, else the exact
            step loop), "step" or "fused" (unclipped models only).
        blocking: the fixed shapes of batch-invariant inference; None picks them for the device.
        precision: "fp32" (default, exact), "bf16" or "int8" for inference matmuls (see ``precision``);
            reads back what runs, which is fp32 where the machine has no fast kernel for the
            precision asked (``precision_choice`` says which kernel and why; ``kernel_choice``).
        token_cache: token representations by token string (``TokenCache``); valid for word
            embeddings too, since a token's word id is a function of its string.
        carried_state: the LSTM state stateful ``embed_sentences`` calls carry from call to call.
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
        self.lstm_path = "auto"
        self.blocking: Optional[Blocking] = None
        self.token_cache = TokenCache()
        self.carried_state: Optional[LstmState] = None
        self._precision = "fp32"
        self.precision_choice: Optional[kernel_choice.KernelChoice] = None

    @property
    def device(self) -> torch.device:
        return self.char_encoder.projection.weight.device

    @property
    def precision(self) -> str:
        return self._precision

    @precision.setter
    def precision(self, value: str) -> None:
        """Asks for ``value``; what runs is what this machine can run fast (``kernel_choice``):
        exact fp32 where the requested precision has no fast kernel (with one warning)."""
        choice = kernel_choice.choose(value, self.device)
        if choice.runs != self._precision:
            if choice.runs == "int8":
                kernel_choice.check_int8_fits(self)
            self._precision = choice.runs
            self.token_cache.clear()  # its rows were computed in the other precision
        self.precision_choice = choice

    def blocking_for_run(self) -> Blocking:
        blocking = self.blocking or Blocking.for_device(self.device)
        return dataclasses.replace(blocking, precision=self._precision)

    def encode_tokens(self, tokens: Sequence[str]) -> Tuple[Tensor, Optional[Tensor]]:
        """N token strings -> (char ids (N, C), word ids (N,) or None), long, on the bilm's device."""
        chars, words = self.indexer.encode(tokens)
        word_ids = torch.from_numpy(words).to(self.device) if words is not None else None
        return torch.from_numpy(chars).to(self.device, torch.long), word_ids

    def forward(self, char_ids: Tensor, word_ids: Optional[Tensor] = None) -> BiLMOutput:
        """char_ids (B, T, C), 0 at padding positions (a sentence's tokens first), and word ids
        (B, T) for models with a word embedding -> BiLMOutput."""
        mask = char_ids.gt(0).any(dim=-1)
        lengths = mask.sum(dim=1)
        if not torch.equal(mask, _prefix_mask(lengths, mask.shape[1])):
            raise ValueError(
                "char_ids must hold each sentence's tokens first and padding (all-zero rows) after; "
                "found a padding position before a token."
            )
        tokens = self.token_representations(char_ids[mask], word_ids[mask] if word_ids is not None else None)
        layers, _ = self.contextualize(tokens, lengths.tolist())
        padded = layers.new_zeros(layers.shape[0], *mask.shape, layers.shape[-1])
        padded[:, mask] = layers
        return BiLMOutput(layers=padded, mask=mask)

    def token_representations(self, char_ids: Tensor, word_ids: Optional[Tensor] = None) -> Tensor:
        """char_ids (N, C), word_ids (N,) or None -> (N, P); batch-invariant when gradients are off."""
        if torch.is_grad_enabled():
            return self.char_encoder(char_ids, word_ids)
        return self.char_encoder.forward_invariant(char_ids, self.blocking_for_run(), word_ids)

    def contextualize(
        self,
        tokens: Tensor,
        lengths: Sequence[int],
        initial_state: Optional[LstmState] = None,
        path: Optional[str] = None,
    ) -> Tuple[Tensor, Optional[LstmState]]:
        """Run both LSTM stacks over packed sentences.

        Args:
            tokens: (N, P) token representations, sentence after sentence (sentence-major).
            lengths: B sentence lengths summing to N.
            initial_state: per-sentence LSTM state to start from (stateful use); default zeros.
            path: overrides ``self.lstm_path`` for this call ("auto", "step" or "fused").
        Returns:
            layers (L+1, N, 2P) and, when ``initial_state`` was given, the state after each
            sentence's last token (for the next call).
        """
        if sum(lengths) != tokens.shape[0]:
            raise ValueError(f"lengths sum to {sum(lengths)} but {tokens.shape[0]} tokens were given.")
        run = self._layer_runner(list(lengths), path or self.lstm_path, initial_state is not None, tokens.device)
        outputs, finals = {}, {}
        for direction, stack in (("forward", self.forward_layers), ("backward", self.backward_layers)):
            x = tokens
            for depth, layer in enumerate(stack):
                start = initial_state.layer(direction, depth) if initial_state is not None else None
                x_in = F.dropout(x, self.config.dropout, self.training and torch.is_grad_enabled())
                y, finals[direction, depth] = run(layer, x_in, direction, start)
                if self.config.residual and depth > 0:
                    y = y + x_in
                outputs[direction, depth] = x = y
        layers = [torch.cat([tokens, tokens], dim=1)]
        for depth in range(self.config.n_layers):
            layers.append(torch.cat([outputs["forward", depth], outputs["backward", depth]], dim=1))
        final_state = LstmState.from_layers(finals, self.config.n_layers) if initial_state is not None else None
        return torch.stack(layers), final_state

    def _layer_runner(self, lengths: List[int], path: str, stateful: bool, device: torch.device):
        """(layer, x (N, I), direction, start state) -> (y (N, P), final state or None)."""
        if path not in ("auto", "step", "fused"):
            raise ValueError(f"The LSTM path must be 'auto', 'step' or 'fused', got {path!r}.")
        clipped = self.config.is_clipped
        reduced = self._precision != "fp32"
        if path == "fused" and (clipped or stateful or reduced):
            reason = (
                "the model clips its cells or projections"
                if clipped
                else "stateful runs need the step loop"
                if stateful
                else f"{self._precision} runs the step loop"
            )
            raise ValueError(f"The fused LSTM path cannot run this call: {reason}. Use path='step'.")
        if torch.is_grad_enabled():
            if stateful:
                raise ValueError("Stateful runs are for inference; call them under torch.no_grad().")
            order = PackedOrder.build(lengths, device)
            return lambda layer, x, direction, start: (recurrence.run_differentiable(layer, x, order, direction), None)
        blocking = self.blocking_for_run()
        if path == "fused" or (path == "auto" and not (clipped or stateful or reduced) and device.type == "cuda"):
            plan = LanePlan.build(lengths, blocking.fused_rows, blocking.fused_steps, device)
            return lambda layer, x, direction, start: recurrence.run_fused_blocks(
                layer, x, plan, direction, start, blocking
            )
        plan = LanePlan.build(lengths, self._step_width(lengths, blocking, device), 1, device)
        scratch = recurrence.Scratch()  # the layers run one after another: one input projection buffer
        return lambda layer, x, direction, start: recurrence.run_step_loop(
            layer, x, plan, direction, start, blocking, scratch
        )

    def _step_width(self, lengths: List[int], blocking: Blocking, device: torch.device) -> int:
        """Lanes per chunk of the step loop: in int8, and in fp32 through oneDNN, as many as there
        are sentences, up to ``step_lanes`` (any row count gives the same rows there); else the
        fixed ``step_columns`` (bf16: measured 32 as the best balance of one sentence and many)."""
        if not rows_any_count(device, self._precision):
            return blocking.step_columns
        return recurrence.step_lanes_for(lengths, blocking.step_lanes, self.config.lstm_dim)

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


def _prefix_mask(lengths: Tensor, width: int) -> Tensor:
    return torch.arange(width, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
