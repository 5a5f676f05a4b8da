"""How a loaded model computes a call: one ``Backend`` class per way of computing, made from the
model's ``Kernels`` (``backend_for``, the one place that maps kernels to a way). A backend owns the
matmuls (its ``kernels``), the char convolutions of a call (``represent``) and its LSTM layers
(``contextualize``); the network's modules call it and never ask which one runs.

- ``Backend``: the CPU's kernels (and torch's on a GPU without Triton): the char encoder in blocks
  of tokens, the LSTM layers through the step loop or torch's fused kernel (``lstm_paths``).
- ``TritonBackend``: the Triton kernels on a CUDA GPU: the char encoder over every token of a call
  at once, both stacks through ``gpu_stacks`` (replayed as CUDA graphs, ``gpu_graphs``).

Adding a way of computing: a ``Kernels`` subclass for its matmuls (``kernels.kernel_set``), chosen
by ``kernels.select``; and, where it also runs the convolutions or the LSTM layers its own way, a
``Backend`` subclass here, listed in ``BACKENDS`` under its kernels' class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Protocol, Sequence, Tuple, Type, cast

from torch import Tensor, nn

from ..kernels.kernel_set import Kernels, TritonKernels
from ..kernels.triton_ops import TritonOps
from . import gpu_stacks
from .config import BiLMConfig
from .gpu_graphs import CallGraphs
from .lstm_layer import LstmLayer, LstmState
from .lstm_paths import LayerRunner, inference_runner

if TYPE_CHECKING:
    from .char_encoder import CharEncoder


class Stacked(Protocol):
    """What a backend reads of the biLM it runs (``BiLM``): its sizes, its two stacks of layers, its
    CUDA graphs, and how it runs the stacks through a layer runner."""

    config: BiLMConfig
    forward_layers: nn.ModuleList
    backward_layers: nn.ModuleList
    cuda_graphs: Optional[CallGraphs]

    def run_stacks(
        self, run: LayerRunner, tokens: Tensor, initial_state: Optional[LstmState], dropout: bool
    ) -> Tuple[Tensor, Optional[LstmState]]: ...


class Backend:
    """A call through ``kernels`` (see the module docstring): each token's representation and each
    sentence's layers bitwise independent of the rest of the call."""

    def __init__(self, kernels: Kernels) -> None:
        self.kernels = kernels

    def represent(
        self, encoder: CharEncoder, char_ids: Tensor, word_ids: Optional[Tensor], already_cut: bool
    ) -> Tensor:
        """Token representations: char_ids (N, C) [cut after the longest token on the host where
        ``already_cut``], word_ids (N,) or None -> (N, P)."""
        return encoder.encode_in_blocks(char_ids, word_ids, self.kernels)

    def contextualize(
        self, bilm: Stacked, tokens: Tensor, lengths: Sequence[int], initial_state: Optional[LstmState], path: str
    ) -> Tuple[Tensor, Optional[LstmState]]:
        """Both stacks over packed sentences (see ``BiLM.contextualize``): layers (L+1, N, 2P) and
        the final state where ``initial_state`` was given."""
        stateful = initial_state is not None
        run = inference_runner(bilm.config, self.kernels, list(lengths), path, stateful, tokens.device)
        return bilm.run_stacks(run, tokens, initial_state, dropout=False)


class TritonBackend(Backend):
    """The Triton kernels of a CUDA GPU (``TritonKernels``)."""

    def __init__(self, kernels: Kernels) -> None:
        super().__init__(kernels)
        self._ops: TritonOps = cast(TritonKernels, kernels).ops  # BACKENDS pairs this class with TritonKernels

    def represent(
        self, encoder: CharEncoder, char_ids: Tensor, word_ids: Optional[Tensor], already_cut: bool
    ) -> Tensor:
        ids = char_ids if already_cut else encoder.trim(char_ids)  # finding the longest token waits for the GPU
        return encoder.encode_at_once(ids, word_ids, self._ops)

    def contextualize(
        self, bilm: Stacked, tokens: Tensor, lengths: Sequence[int], initial_state: Optional[LstmState], path: str
    ) -> Tuple[Tensor, Optional[LstmState]]:
        """Through the Triton kernels, unless the fused path is asked for: stateless calls replay a
        CUDA graph (``bilm.cuda_graphs``) from their bucket's second call on, the others launch
        the kernels one by one; the same bits either way."""
        if path == "fused":
            return super().contextualize(bilm, tokens, lengths, initial_state, path)
        forward, backward = (
            cast("Sequence[LstmLayer]", stack) for stack in (bilm.forward_layers, bilm.backward_layers)
        )
        stacks = gpu_stacks.Stacks.of(self._ops, forward, backward, bilm.config.residual)
        graphs = bilm.cuda_graphs
        if initial_state is None and graphs is not None and self.kernels.captures_graphs and graphs.takes(tokens):
            replayed = graphs.run(self._ops, stacks, tokens, lengths)
            if replayed is not None:
                return replayed, None
        schedule = gpu_stacks.Schedule.build(lengths)
        return gpu_stacks.run_stacks(
            self._ops, stacks, tokens, schedule.tables(schedule.on(tokens.device)), initial_state
        )


BACKENDS: Dict[Type[Kernels], Type[Backend]] = {TritonKernels: TritonBackend}


def backend_for(kernels: Kernels) -> Backend:
    """The backend that computes the way ``kernels`` take (``Backend`` unless ``BACKENDS`` lists
    another for their class)."""
    return BACKENDS.get(type(kernels), Backend)(kernels)
