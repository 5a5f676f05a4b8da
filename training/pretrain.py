"""Pretrain a biLM on a prepared corpus (training.corpus) with a vocabulary (training.vocab).

    python -m training.pretrain training/configs/pretrain-cpu.json --output runs/small
    torchrun --nproc_per_node 4 -m training.pretrain training/configs/pretrain-gpu.json --output runs/big
    python -m training.pretrain CONFIG --output RUN --set max_steps=100 --set softmax=sampled

One process per device; under torchrun, DDP (NCCL on GPUs, gloo on CPU). Each process reads only
its own data streams (training.batching). A run resumes from RUN/checkpoints/latest when there is
one, with the same data order, RNG states and optimizer state, so its loss curve continues as if
never stopped. Only rank 0 writes: RUN/log.jsonl, RUN/curve.png, RUN/checkpoints/, and at the end
RUN/bilm/ (native weights for the elmo component).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
import typer
from torch import Tensor
from tqdm import tqdm

from spacy_elmo.bilm import BiLM
from spacy_elmo.config import BiLMConfig
from spacy_elmo.weights import load_bilm, save_bilm

from .batching import SentenceArray, TokenTable, TrainingBatch, batches_in_order, make_batch, open_streams
from .checkpoint import latest_checkpoint, load_checkpoint, resolve_checkpoint, save_checkpoint
from .corpus import shard_paths
from .curve import plot_learning_curve
from .objective import LanguageModelLoss
from .vocab import Vocabulary


@dataclass
class TrainConfig:
    corpus: str = ""                  # directory with train/ and dev/ shards
    vocab: str = ""                   # vocab.txt; default with init_from: the source's vocab.txt
    preset: str = "small"             # BiLMConfig preset ...
    model: Dict[str, Any] = field(default_factory=dict)  # ... and overrides of its sizes
    init_from: Optional[str] = None   # a native biLM, checkpoint or run (its latest) to continue training
    softmax: str = "full"             # "full" or "sampled"
    n_samples: int = 8192             # sampled softmax candidates per batch
    optimizer: str = "adagrad"        # "adagrad" (the original, lr 0.2) or "adam"
    lr: float = 0.2
    clip_norm: float = 10.0           # gradient norm clipping; 0 disables
    dropout: float = 0.1
    batch_tokens: int = 4096          # global batch, <S>/</S> included
    data_streams: int = 0             # 0: one per process
    max_steps: int = 0                # 0: no limit
    max_minutes: float = 0.0          # 0: no limit
    eval_every: int = 200             # steps
    eval_tokens: int = 50000          # dev tokens per evaluation
    log_every: int = 10               # steps
    checkpoint_every: int = 500       # steps
    checkpoint_minutes: float = 10.0  # also checkpoint at least this often
    keep_checkpoints: int = 3
    seed: int = 0
    bf16: bool = True                 # bf16 autocast on GPU
    compile: bool = False             # torch.compile the loss module
    threads: int = 0                  # CPU threads per process; 0: cores / processes

    @classmethod
    def load(cls, path: Optional[Path], overrides: List[str]) -> "TrainConfig":
        values: Dict[str, Any] = json.loads(Path(path).read_text()) if path else {}
        for item in overrides:
            key, sep, raw = item.partition("=")
            if not sep:
                raise typer.BadParameter(f"--set takes key=value, got {item!r}.")
            try:
                values[key] = json.loads(raw)
            except json.JSONDecodeError:
                values[key] = raw
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise typer.BadParameter(f"Unknown training settings {unknown}.")
        return cls(**values)


@dataclass
class Run:
    """Where this process stands in the job: rank, world size, device, its data streams."""

    rank: int
    world: int
    device: torch.device
    streams: List[int]
    n_streams: int

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def setup(cls, cfg: TrainConfig) -> "Run":
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available()
        device = torch.device(f"cuda:{local}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(cfg.threads or max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
        if world > 1:
            dist.init_process_group("nccl" if cuda else "gloo")
        n_streams = cfg.data_streams or world
        if n_streams % world:
            raise ValueError(f"data_streams ({n_streams}) must be a multiple of the number of processes ({world}).")
        per_rank = n_streams // world
        return cls(rank, world, device, list(range(rank * per_rank, (rank + 1) * per_rank)), n_streams)

    def all_sum(self, values: List[float]) -> List[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.world > 1:
            dist.all_reduce(tensor)
        return tensor.tolist()

    def gather(self, value: Any) -> List[Any]:
        if self.world == 1:
            return [value]
        values: List[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values


def build_bilm(cfg: TrainConfig, vocab: Vocabulary) -> BiLM:
    """A new biLM of the preset's size, or one continued from ``init_from`` with a head for this
    vocabulary (rows of words it shares with the source's vocabulary are kept)."""
    if not cfg.init_from:
        config = BiLMConfig.preset(cfg.preset, **cfg.model, vocab_size=len(vocab), dropout=cfg.dropout)
        return BiLM(config)
    source_dir = resolve_checkpoint(Path(cfg.init_from))
    source = load_bilm(source_dir)
    bilm = BiLM(source.config.replace(vocab_size=len(vocab), dropout=cfg.dropout), source.indexer)
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("lm_head.")}
    bilm.load_state_dict(state, strict=False)
    source_vocab = source_dir / "vocab.txt"
    if source.lm_head is not None and source_vocab.is_file():
        old = Vocabulary.load(source_vocab)
        shared = [(i, old.index[w]) for i, w in enumerate(vocab.words) if w in old.index and old.index[w] < source.config.vocab_size]
        with torch.no_grad():
            for new_row, old_row in shared:
                bilm.lm_head.weight[new_row] = source.lm_head.weight[old_row]
                bilm.lm_head.bias[new_row] = source.lm_head.bias[old_row]
    return bilm


def vocab_path(cfg: TrainConfig) -> Path:
    """The configured vocab.txt, else the one of the model given as init_from."""
    if cfg.vocab:
        return Path(cfg.vocab)
    source_vocab = resolve_checkpoint(Path(cfg.init_from)) / "vocab.txt" if cfg.init_from else None
    if source_vocab and source_vocab.is_file():
        return source_vocab
    raise ValueError("No vocabulary: set vocab (a vocab.txt from `python -m training.vocab`), or init_from a checkpoint that has one.")


def make_optimizer(cfg: TrainConfig, bilm: BiLM) -> torch.optim.Optimizer:
    if cfg.optimizer == "adagrad":
        return torch.optim.Adagrad(bilm.parameters(), lr=cfg.lr, initial_accumulator_value=1.0)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(bilm.parameters(), lr=cfg.lr)
    raise ValueError(f"optimizer must be 'adagrad' or 'adam', got {cfg.optimizer!r}.")


def dev_batches(corpus: Path, table: TokenTable, max_tokens: int, batch_tokens: int) -> List[TrainingBatch]:
    """The first ``max_tokens`` tokens of the dev split, in batches (the same every evaluation)."""
    sentences = SentenceArray.from_shards(shard_paths(corpus / "dev"), table)
    chosen, total = [], 0
    for index in range(len(sentences)):
        if total >= max_tokens:
            break
        chosen.append(sentences.sentence(index))
        total += len(chosen[-1]) + 2
    return batches_in_order(chosen, table, batch_tokens)


@torch.no_grad()
def perplexity(loss_module: LanguageModelLoss, batches: List[TrainingBatch], device: torch.device) -> Dict[str, float]:
    """Full-softmax perplexity: forward, backward and their average (exp of the mean NLL of both)."""
    was_training = loss_module.training
    loss_module.eval()
    forward = backward = targets = 0.0
    for batch in batches:
        nll_forward, nll_backward = loss_module(batch.to(device))
        forward, backward, targets = forward + float(nll_forward), backward + float(nll_backward), targets + batch.n_targets
    loss_module.train(was_training)
    return {
        "forward": math.exp(forward / targets),
        "backward": math.exp(backward / targets),
        "average": math.exp((forward + backward) / (2 * targets)),
        "targets": int(targets),
    }


def rng_state(run: Run) -> Dict[str, Tensor]:
    """Every rank's torch RNG state (and CUDA's), gathered for rank 0 to save."""
    mine = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        mine["cuda"] = torch.cuda.get_rng_state(run.device)
    gathered = run.gather({k: v.cpu() for k, v in mine.items()})
    return {f"rank{r}.{k}": v for r, states in enumerate(gathered) for k, v in states.items()}


def restore_rng(run: Run, rng: Dict[str, Tensor]) -> None:
    if f"rank{run.rank}.torch" in rng:
        torch.set_rng_state(rng[f"rank{run.rank}.torch"])
        if torch.cuda.is_available() and f"rank{run.rank}.cuda" in rng:
            torch.cuda.set_rng_state(rng[f"rank{run.rank}.cuda"], run.device)


class JsonlLog:
    """Appends one JSON object per line (rank 0). On resume, lines after the resumed step (written by
    the run that was killed) are dropped first, so the log is the run's one curve."""

    def __init__(self, path: Path, resume_step: int, enabled: bool) -> None:
        self.path, self.enabled = path, enabled
        if enabled and path.exists():
            kept = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= resume_step]
            path.write_text("".join(line + "\n" for line in kept))

    def write(self, **record: Any) -> None:
        if self.enabled:
            with open(self.path, "a") as stream:
                stream.write(json.dumps(record) + "\n")


def export(bilm: BiLM, directory: Path) -> Path:
    """Native weights without the LM head: what the elmo component loads."""
    plain = BiLM(bilm.config.replace(vocab_size=0), bilm.indexer)
    plain.load_state_dict({k: v for k, v in bilm.state_dict().items() if not k.startswith("lm_head.")})
    return save_bilm(plain, directory)


def train(cfg: TrainConfig, output: Path) -> Dict[str, Any]:
    run = Run.setup(cfg)
    output = Path(output)
    corpus, checkpoints = Path(cfg.corpus), output / "checkpoints"
    vocab = Vocabulary.load(vocab_path(cfg))

    # The model: resumed, continued from another biLM, or new (same seed on every rank).
    resume_from = latest_checkpoint(checkpoints)
    torch.manual_seed(cfg.seed)
    bilm = load_bilm(resume_from) if resume_from else build_bilm(cfg, vocab)
    table = TokenTable(vocab, bilm.indexer)  # the model's own characters (and words) for its input
    streams = open_streams(corpus / "train", run.streams, run.n_streams, cfg.batch_tokens, cfg.seed, table)
    dev = dev_batches(corpus, table, cfg.eval_tokens, cfg.batch_tokens) if run.main else []
    bilm = bilm.to(run.device).train()
    optimizer = make_optimizer(cfg, bilm)
    state = {"step": 0, "tokens": 0, "elapsed": 0.0, "best_dev": None}
    torch.manual_seed(cfg.seed + 1 + run.rank)  # dropout and sampling differ between ranks
    if resume_from:
        optimizer_state, state, rng = load_checkpoint(resume_from)
        if state.get("data_streams", run.n_streams) != run.n_streams:
            raise ValueError(
                f"{resume_from} was written by a run with {state['data_streams']} data streams; resume it with "
                f"--set data_streams={state['data_streams']} (any number of processes that divides it)."
            )
        optimizer.load_state_dict(optimizer_state)
        for stream in streams:
            stream.restore(*state["streams"][str(stream.number)])
        restore_rng(run, rng)
    loss_module = LanguageModelLoss(bilm, cfg.softmax, cfg.n_samples)
    model = torch.nn.parallel.DistributedDataParallel(loss_module) if run.world > 1 else loss_module
    if cfg.compile:
        model = torch.compile(model)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.bf16 and run.device.type == "cuda")
    log = JsonlLog(output / "log.jsonl", state["step"], run.main)
    if run.main:
        output.mkdir(parents=True, exist_ok=True)
        (output / "train-config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))

    progress = tqdm(total=cfg.max_steps or None, initial=state["step"], disable=not run.main, unit="step", dynamic_ncols=True)
    started, last_checkpoint = time.time() - state["elapsed"], time.time()
    window = {"nll": 0.0, "targets": 0.0, "tokens": 0.0, "time": time.time()}
    while True:
        # One step: each stream contributes a batch; the loss is normalized by the global count.
        sentences = [s.sentences.sentence(i) for s in streams for i in s.next_batch()]
        batch = make_batch(sentences, table).to(run.device)
        with autocast:
            nll_forward, nll_backward = model(batch)
        elapsed = time.time() - started
        out_of_time = cfg.max_minutes and elapsed >= 60 * cfg.max_minutes
        checkpoint_due = time.time() - last_checkpoint >= 60 * cfg.checkpoint_minutes
        targets, nll_sum, tokens, stop, save_now = run.all_sum(
            [2 * batch.n_targets, float((nll_forward + nll_backward).detach()), len(batch.type_ids), float(bool(out_of_time)), float(checkpoint_due)]
        )
        loss = (nll_forward + nll_backward) * (run.world / targets)  # DDP averages over ranks
        if not math.isfinite(nll_sum):
            first = " ".join(table.strings[i] for i in batch.type_ids[1 : batch.lengths[0] - 1].tolist())[:80]
            raise FloatingPointError(
                f"Non-finite loss at step {state['step'] + 1}: batch of {len(batch.lengths)} sentences, {int(tokens)} tokens "
                f"on this rank (first: {first!r}). The last checkpoint is {latest_checkpoint(checkpoints)}; lower lr or check the data."
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.clip_norm:
            torch.nn.utils.clip_grad_norm_(bilm.parameters(), cfg.clip_norm)
        optimizer.step()
        state["step"] += 1
        state["tokens"] += int(tokens)
        state["elapsed"] = time.time() - started
        window["nll"] += nll_sum
        window["targets"] += targets
        window["tokens"] += tokens
        progress.update(1)

        step = state["step"]
        finished = bool(stop) or (cfg.max_steps and step >= cfg.max_steps)
        if step % cfg.log_every == 0 or finished:
            rate = window["tokens"] / max(1e-9, time.time() - window["time"])
            mean_nll = window["nll"] / window["targets"]
            record = {"step": step, "tokens": state["tokens"], "elapsed": round(state["elapsed"], 2), "loss": mean_nll, "tokens_per_s": rate}
            if cfg.softmax == "full":  # a sampled-softmax loss is no perplexity
                record["train_ppl"] = math.exp(mean_nll)
            log.write(**record)
            progress.set_postfix(tok_s=f"{rate:,.0f}", loss=f"{mean_nll:.3f}", best_dev_ppl=f"{state['best_dev'] or math.nan:.1f}")
            window = {"nll": 0.0, "targets": 0.0, "tokens": 0.0, "time": time.time()}
        if run.main and (step % cfg.eval_every == 0 or finished):
            scores = perplexity(loss_module, dev, run.device)
            state["best_dev"] = min(scores["average"], state["best_dev"] or math.inf)
            log.write(step=step, tokens=state["tokens"], elapsed=round(state["elapsed"], 2), dev_ppl=scores["average"], dev_ppl_forward=scores["forward"], dev_ppl_backward=scores["backward"])
            plot_learning_curve(output / "log.jsonl", output / "curve.png")
        if step % cfg.checkpoint_every == 0 or save_now or finished:
            positions = run.gather({str(s.number): list(s.state()) for s in streams})
            state["streams"] = {k: v for part in positions for k, v in part.items()}
            rng = rng_state(run)
            if run.main:
                trainer = {**state, "world": run.world, "data_streams": run.n_streams}
                try:
                    save_checkpoint(checkpoints, step, bilm, vocab, optimizer.state_dict(), trainer, rng, cfg.keep_checkpoints)
                except OSError as err:
                    raise OSError(
                        err.errno, f"Could not write the checkpoint of step {step} in {checkpoints} ({err.strerror or err}); "
                        f"the previous one, {latest_checkpoint(checkpoints)}, is intact and the run resumes from it."
                    ) from err
            last_checkpoint = time.time()
        if finished:
            break
    progress.close()
    if run.main:
        export(bilm, output / "bilm")
    if run.world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return state


app = typer.Typer(add_completion=False)


@app.command()
def main(
    config: Optional[Path] = typer.Argument(None, help="A JSON file of TrainConfig settings."),
    output: Path = typer.Option(..., "--output", "-o", help="Run directory (resumed if it has checkpoints)."),
    set_: List[str] = typer.Option([], "--set", help="key=value overriding the config (JSON values)."),
) -> None:
    """Pretrain (or resume, or continue training) a biLM."""
    state = train(TrainConfig.load(config, set_), output)
    if int(os.environ.get("RANK", "0")) == 0:
        typer.echo(f"Done: {state['step']} steps, {state['tokens']:,} tokens, best dev perplexity {state['best_dev']:.2f}; weights in {output / 'bilm'}")


if __name__ == "__main__":
    app()
