"""What one process of a pretraining run trains with: the biLM and its loss, the data, the optimizer
and the run's state, set up new or resumed from the run's latest checkpoint; and the checkpoints it
writes. A resumed session has the same data positions, RNG states and optimizer state as the run
had at that checkpoint, so its loss curve continues as if never stopped."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, List

import torch
from torch import nn

from spacy_elmo.network.bilm import BiLM
from spacy_elmo.weights.native import load_bilm

from ..vocab import Vocabulary
from .batching import Stream, TokenTable, TrainingBatch, dev_batches, open_streams
from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from .lm_head import build_bilm, vocab_path
from .objective import LanguageModelLoss
from .optimizers import make_optimizer
from .processes import Processes
from .random_state import gathered_rng_states, restore_rng_states
from .run_state import RunState, state_from_checkpoint, state_to_checkpoint
from .train_config import TrainConfig


@dataclass
class Session:
    """``state``: what the run carries between steps and into every checkpoint (``RunState``).
    ``model``: the loss module as trained (wrapped in DDP for several processes, compiled with
    ``compile``); ``dev``: rank 0's dev batches (empty elsewhere)."""

    cfg: TrainConfig
    output: Path
    processes: Processes
    vocab: Vocabulary
    bilm: BiLM
    table: TokenTable
    streams: List[Stream]
    dev: List[TrainingBatch]
    optimizer: torch.optim.Optimizer
    state: RunState
    loss_module: LanguageModelLoss
    model: nn.Module
    autocast: ContextManager

    @property
    def checkpoints(self) -> Path:
        return self.output / "checkpoints"

    def save_checkpoint(self) -> None:
        """Every process's stream positions and RNG states, written by rank 0 with the model and
        the optimizer as checkpoint ``state.step``."""
        positions = self.processes.gather({str(s.number): list(s.state()) for s in self.streams})
        self.state.streams = {k: v for part in positions for k, v in part.items()}
        rng = gathered_rng_states(self.processes)
        if not self.processes.main:
            return
        step = self.state.step
        trainer = state_to_checkpoint(self.state, self.processes.world, self.processes.n_streams)
        try:
            save_checkpoint(
                self.checkpoints,
                step,
                self.bilm,
                self.vocab,
                self.optimizer.state_dict(),
                trainer,
                rng,
                self.cfg.keep_checkpoints,
            )
        except OSError as err:
            raise OSError(
                err.errno,
                f"Could not write the checkpoint of step {step} in {self.checkpoints} ({err.strerror or err}); "
                f"the previous one, {latest_checkpoint(self.checkpoints)}, is intact and the run resumes from it.",
            ) from err


def open_session(cfg: TrainConfig, output: Path) -> Session:
    """Join the job's processes and set up this one's share of the run in ``output``: resumed from
    its latest checkpoint, continued from another biLM (``init_from``), or new."""
    processes = Processes.setup(cfg)
    output = Path(output)
    vocab = Vocabulary.load(vocab_path(cfg))
    resume_from = latest_checkpoint(output / "checkpoints")
    torch.manual_seed(cfg.seed)  # the same new model on every rank
    bilm = load_bilm(resume_from) if resume_from else build_bilm(cfg, vocab)
    table = TokenTable(vocab, bilm.indexer)  # the model's own characters (and words) for its input
    streams = open_streams(
        Path(cfg.corpus) / "train", processes.streams, processes.n_streams, cfg.batch_tokens, cfg.seed, table
    )
    dev = dev_batches(Path(cfg.corpus), table, cfg.eval_tokens, cfg.batch_tokens) if processes.main else []
    bilm = bilm.to(processes.device).train()
    optimizer = make_optimizer(cfg.optimizer, bilm.parameters(), cfg.lr)
    state = RunState()
    torch.manual_seed(cfg.seed + 1 + processes.rank)  # dropout and sampling differ between ranks
    if resume_from:
        state = _resume(resume_from, processes, optimizer, streams)
    loss_module = LanguageModelLoss(bilm, cfg.softmax, cfg.n_samples)
    model = torch.nn.parallel.DistributedDataParallel(loss_module) if processes.world > 1 else loss_module
    if cfg.compile:
        model = torch.compile(model)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.bf16 and processes.device.type == "cuda")
    return Session(
        cfg, output, processes, vocab, bilm, table, streams, dev, optimizer, state, loss_module, model, autocast
    )


def _resume(
    checkpoint: Path, processes: Processes, optimizer: torch.optim.Optimizer, streams: List[Stream]
) -> RunState:
    """Restore the optimizer, the streams' positions and this rank's RNG states; the run's state."""
    optimizer_state, trainer, rng = load_checkpoint(checkpoint)
    state, data_streams = state_from_checkpoint(trainer)
    if data_streams not in (None, processes.n_streams):
        raise ValueError(
            f"{checkpoint} was written by a run with {data_streams} data streams; resume it with "
            f"--set data_streams={data_streams} (any number of processes that divides it)."
        )
    optimizer.load_state_dict(optimizer_state)
    for stream in streams:
        stream.restore(*state.streams[str(stream.number)])
    restore_rng_states(processes, rng)
    return state
