"""Pretrain a biLM on a prepared corpus (spacy_elmo.training.corpus) with a vocabulary (spacy_elmo.training.vocab).

    python -m spacy_elmo.training.pretrain pretrain-cpu --output runs/mini
    torchrun --nproc_per_node 4 -m spacy_elmo.training.pretrain pretrain-gpu --output runs/big
    python -m spacy_elmo.training.pretrain CONFIG --output RUN --set max_steps=100 --set softmax=sampled

One process per device; under torchrun, DDP (NCCL on GPUs, gloo on CPU). Each process reads only
its own data streams (spacy_elmo.training.loop.batching). A run resumes from RUN/checkpoints/latest when there is
one, with the same data order, RNG states and optimizer state, so its loss curve continues as if
never stopped. Only rank 0 writes: RUN/log.jsonl, RUN/curve.png, RUN/checkpoints/ (with the best dev
evaluation's weights, RUN/checkpoints/best), and at the end RUN/bilm/: those best weights, native,
for the elmo component.

This module is the loop; the pieces it runs are in ``loop``: train_config (the settings), session
(setup, resume, checkpoints), step (one step), run_log (the log), objective (the loss and
perplexity) and lm_head (the final weights).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import typer

from spacy_elmo.cli.failure import VERBOSE, fail, show_tracebacks
from spacy_elmo.progress import progress_bar
from spacy_elmo.weights.native import load_bilm

from .loop.batching import dev_batches
from .loop.checkpoint import best_checkpoint, save_best
from .loop.curve import RunCurve
from .loop.lm_head import strip_lm_head
from .loop.objective import perplexity
from .loop.run_log import JsonlLog, LossWindow, device_memory
from .loop.run_state import RunState
from .loop.schedule import budget_spent
from .loop.session import Session, open_session
from .loop.step import Clock, StepTotals, out_of_patience, take_step
from .loop.train_config import TrainConfig


def train(cfg: TrainConfig, output: Path) -> RunState:
    """Train until ``max_steps``, ``max_minutes`` or forever; the run's final state."""
    session = open_session(cfg, output)
    output, state, main = session.output, session.state, session.processes.main
    log = JsonlLog(output / "log.jsonl", state.step, main)
    curve = RunCurve(output, warn=main)
    if main:
        output.mkdir(parents=True, exist_ok=True)
        (output / "train-config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
    progress = BudgetProgress(cfg, state, disable=not main)
    clock, window = Clock(state.elapsed, cfg), LossWindow()
    while True:
        totals = take_step(session, clock)
        _count(state, window, totals, clock)
        progress.advance(state)
        step = state.step
        finished = totals.stop or (cfg.max_steps and step >= cfg.max_steps)
        if step % cfg.log_every == 0 or finished:
            record = {**window.record(state, full_softmax=cfg.softmax == "full"), "lr": totals.lr}
            record.update(device_memory(session.processes.device))
            log.write(**record)
            progress.bar.set_postfix(_progress_figures(record, state))
            window = LossWindow()
        if _evaluation_due(cfg, step, totals) or finished:
            if main:
                _evaluate_on_dev(session, log, curve, last=bool(finished))
            clock.evaluated()
        if step % cfg.checkpoint_every == 0 or totals.save_now or finished:
            session.save_checkpoint()
            clock.checkpointed()
        if finished:
            break
    progress.bar.close()
    if out_of_patience(session):
        log.write(step=state.step, stopped=f"no new best dev perplexity in {cfg.patience} evaluations")
    if main:
        _take_the_best_weights(session, log)
        _evaluate_on_full_dev(session, log)
        strip_lm_head(session.bilm, output / "bilm")
    session.processes.close()
    return state


class BudgetProgress:
    """A bar of the run against its budget, done/total with an ETA: steps of ``max_steps``, minutes
    of ``max_minutes``, or, with both, per cent of the budget (spent: the larger share, as the
    learning rate's schedule counts it); steps alone where the run has no budget."""

    def __init__(self, cfg: TrainConfig, state: RunState, disable: bool) -> None:
        self.cfg = cfg
        if cfg.max_steps and cfg.max_minutes:
            total, unit = 100.0, "% of the budget"
        elif cfg.max_minutes:
            total, unit = float(cfg.max_minutes), "min"
        else:
            total, unit = cfg.max_steps or None, "step"
        shape = BUDGET_BAR if total else STEP_COUNT
        self.bar = progress_bar(total=total, unit=unit, disable=disable, dynamic_ncols=True, bar_format=shape)
        self.advance(state)

    def advance(self, state: RunState) -> None:
        """Move the bar to where ``state`` is."""
        done = self._done(state)
        self.bar.update(done - self.bar.n)

    def _done(self, state: RunState) -> float:
        cfg = self.cfg
        if cfg.max_steps and cfg.max_minutes:
            return round(100.0 * (budget_spent(state.elapsed, state.step, cfg.max_minutes, cfg.max_steps) or 0.0), 1)
        if cfg.max_minutes:
            return round(min(state.elapsed / 60.0, cfg.max_minutes), 2)
        return state.step


BUDGET_BAR = "{desc}{percentage:3.0f}%|{bar}| {n:g}/{total:g} {unit} [{elapsed}<{remaining}{postfix}]"
STEP_COUNT = "{desc}{n:g} {unit} [{elapsed}, {rate_fmt}{postfix}]"  # no budget: no total, no ETA


def _evaluation_due(cfg: TrainConfig, step: int, totals: StepTotals) -> bool:
    return bool(cfg.eval_every and step % cfg.eval_every == 0) or totals.evaluate_now


def _progress_figures(record: Dict[str, Any], state: RunState) -> Dict[str, str]:
    """What the bar shows: speed and loss, and the best dev perplexity once there is one."""
    figures = {"tok_s": f"{record['tokens_per_s']:,.0f}", "loss": f"{record['loss']:.3f}"}
    if state.best_dev is not None:
        figures["best_dev_ppl"] = f"{state.best_dev:.1f}"
    return figures


def _count(state: RunState, window: LossWindow, totals: StepTotals, clock: Clock) -> None:
    state.step += 1
    state.tokens += int(totals.tokens)
    state.elapsed = clock.elapsed()
    window.add(totals.nll, totals.targets, totals.tokens)


def _evaluate_on_dev(session: Session, log: JsonlLog, curve: RunCurve, last: bool) -> None:
    """Dev perplexity on the evaluation subset (the first ``eval_tokens`` of dev, the same every
    time) into the log, the best so far into the state; the curve redrawn where due (``last``: the
    run's final evaluation, which always redraws it)."""
    state = session.state
    scores = perplexity(session.loss_module, session.dev, session.processes.device)
    improved = scores["average"] < (state.best_dev or math.inf)
    state.evaluations_since_best = 0 if improved else state.evaluations_since_best + 1
    if improved:
        state.best_dev = scores["average"]
    record = _dev_record(state, scores, f"subset: the first {session.cfg.eval_tokens:,} tokens of dev", "dev")
    log.write(**record)
    if improved:
        figures = {k: v for k, v in record.items() if k.startswith("dev_")}
        save_best(session.checkpoints, state.step, session.bilm, session.vocab, figures)
    curve.evaluated(last)


def _take_the_best_weights(session: Session, log: JsonlLog) -> None:
    """End on the weights of the best dev evaluation (a run that went past its best, or stopped for
    patience, would otherwise end on worse ones); the log says which step's they are."""
    best = best_checkpoint(session.checkpoints)
    best_step = json.loads((best / "best.json").read_text())["step"] if best else session.state.step
    if best_step != session.state.step:
        session.bilm.load_state_dict(load_bilm(best).state_dict())
    log.write(step=session.state.step, final_weights_from_step=best_step)


def _evaluate_on_full_dev(session: Session, log: JsonlLog) -> None:
    """The run's final figure: perplexity on the whole dev split of its final (best) weights, what
    ``spacy_elmo.training.evaluate RUN --split dev`` gives; into the log and the state (``final_dev``)."""
    state, cfg = session.state, session.cfg
    batches = dev_batches(Path(cfg.corpus), session.table, sys.maxsize, cfg.batch_tokens)
    scores = perplexity(session.loss_module, batches, session.processes.device)
    state.final_dev = scores["average"]
    log.write(**_dev_record(state, scores, "the whole dev split", "final_dev"))


def _dev_record(state: RunState, scores: Dict[str, float], text: str, prefix: str) -> Dict[str, Any]:
    """A log line: {prefix}_ppl (average, forward, backward), on which text, how many predictions."""
    return {
        "step": state.step,
        "tokens": state.tokens,
        "elapsed": round(state.elapsed, 2),
        f"{prefix}_ppl": scores["average"],
        f"{prefix}_ppl_forward": scores["forward"],
        f"{prefix}_ppl_backward": scores["backward"],
        f"{prefix}_text": text,
        f"{prefix}_predictions_per_direction": scores["targets"],
    }


app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)


@app.command()
def main(
    config: Optional[Path] = typer.Argument(
        None, help="A JSON file of TrainConfig settings, or a shipped config's name: pretrain-cpu, pretrain-gpu, ..."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Run directory (resumed if it has checkpoints)."),
    set_: List[str] = typer.Option([], "--set", help="key=value overriding the config (JSON values)."),
    verbose: bool = VERBOSE,
) -> None:
    """Pretrain (or resume, or continue training) a biLM."""
    show_tracebacks(verbose)
    try:
        state = train(TrainConfig.load(config, set_), output)
    except (ValueError, OSError) as err:
        # a setting the run cannot start with (a corpus or vocabulary not there, a value out of range)
        # or a file it cannot read or write: the message says which
        fail("Cannot pretrain", err)
    if int(os.environ.get("RANK", "0")) == 0:
        typer.echo(
            f"Done: {state.step} steps, {state.tokens:,} tokens; dev perplexity {state.final_dev:.2f} on the "
            f"whole dev split (best on the evaluation subset {state.best_dev:.2f}); "
            f"weights in {output / 'bilm'}"
        )


if __name__ == "__main__":
    app()
