"""Perplexity of a biLM on held-out text (always the full softmax), as JSON.

    python -m spacy_elmo.training.evaluate RUN --text held-out.txt --output ppl.json
    python -m spacy_elmo.training.evaluate MODEL --shards corpus/test --output ppl.json
    python -m spacy_elmo.training.evaluate RUN --split test --output ppl.json   # the run's own corpus

MODEL is a biLM with its LM head and ``vocab.txt``: a training checkpoint, or a run directory
(the run's result: the weights of its best dev evaluation, which RUN/bilm holds). Reported: forward,
backward and average perplexity (exp of the mean NLL over both directions' predictions), the number
of predictions, the out-of-vocabulary rate, and a unigram model's perplexity on the same predictions
(from the vocabulary's training counts) for scale.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import torch
import typer

from spacy_elmo.files import atomic_write_text
from spacy_elmo.weights.native import load_bilm

from .corpus import load_splitter, read_paragraphs, read_sentences, sentences
from .loop.batching import TokenTable, TrainingBatch, batches_in_order
from .loop.checkpoint import resolve_checkpoint
from .loop.objective import LanguageModelLoss, perplexity
from .vocab import Vocabulary


def batches_of(token_lists: Iterable[List[str]], table: TokenTable, batch_tokens: int) -> List[TrainingBatch]:
    return batches_in_order((table.ids(tokens) for tokens in token_lists if tokens), table, batch_tokens)


def unigram_perplexity(vocab: Vocabulary, batches: List[TrainingBatch]) -> float:
    """A unigram model with the vocabulary's training counts, on both directions' predictions."""
    total = sum(vocab.counts)
    log_probs = torch.log(torch.tensor(vocab.counts, dtype=torch.float64).clamp_min(1) / total)
    nll, count = 0.0, 0
    for batch in batches:
        targets = torch.cat([batch.word_ids[batch.forward_source + 1], batch.word_ids[batch.backward_source - 1]])
        nll -= float(log_probs[targets].sum())
        count += len(targets)
    return math.exp(nll / count)


def evaluate(
    model: Path,
    token_lists: Iterable[List[str]],
    vocab_path: Optional[Path] = None,
    batch_tokens: int = 4096,
    device: Optional[str] = None,
) -> Dict:
    """Scores on ``device`` (default: CUDA when available, else CPU)."""
    model = resolve_checkpoint(model)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    vocab = Vocabulary.load(vocab_path or model / "vocab.txt")
    bilm = load_bilm(model)
    if bilm.lm_head is None or bilm.config.vocab_size != len(vocab):
        raise ValueError(
            f"{model} has no LM head for this {len(vocab)}-word vocabulary; evaluate a training "
            "checkpoint (RUN/checkpoints/step-...), which keeps its head and vocab.txt."
        )
    table = TokenTable(vocab, bilm.indexer)
    batches = batches_of(token_lists, table, batch_tokens)
    if not batches:
        raise ValueError("No tokens to evaluate on.")
    scores = perplexity(LanguageModelLoss(bilm.to(device)), batches, device)
    words = torch.cat([b.word_ids for b in batches])
    boundaries = 2 * sum(len(b.lengths) for b in batches)
    return {
        "model": str(model),
        "perplexity": scores["average"],
        "perplexity_forward": scores["forward"],
        "perplexity_backward": scores["backward"],
        "predictions_per_direction": scores["targets"],
        "oov_rate": float((words == vocab.unk_id).sum()) / max(1, len(words) - boundaries),
        "unigram_perplexity": unigram_perplexity(vocab, batches),
    }


def training_corpus(model: Path) -> Path:
    """The corpus directory of the run that MODEL (a run or one of its checkpoints) belongs to."""
    for directory in (Path(model), *Path(model).resolve().parents):
        if (directory / "train-config.json").is_file():
            return Path(json.loads((directory / "train-config.json").read_text())["corpus"])
    raise typer.BadParameter(f"{model} is not inside a training run (no train-config.json); give --shards instead.")


def main(
    model: Path = typer.Argument(..., help="A training checkpoint directory (biLM with head + vocab.txt)."),
    text: Optional[Path] = typer.Option(None, help="Held-out raw text (one paragraph per line)."),
    shards: Optional[Path] = typer.Option(None, help="Or a split directory of prepared shards."),
    split: Optional[str] = typer.Option(None, help="Or a split (test, dev) of the corpus MODEL was trained on."),
    output: Optional[Path] = typer.Option(None, help="Write the JSON here (else print it)."),
    pipeline: str = typer.Option("en", help="Tokenizer and sentence splitter for --text (as for the corpus)."),
    vocab: Optional[Path] = typer.Option(None, help="vocab.txt, if not in MODEL."),
) -> None:
    """Full-softmax perplexity of a biLM on held-out text."""
    if sum(option is not None for option in (text, shards, split)) != 1:
        raise typer.BadParameter("give exactly one of --text, --shards or --split.")
    if split is not None:
        shards = training_corpus(model) / split
    if text is not None:
        stats: Dict[str, int] = {}
        token_lists = sentences(load_splitter(pipeline), (p for p in read_paragraphs(text, stats) if p), 256)
    else:
        token_lists = read_sentences(shards)
    result = evaluate(model, token_lists, vocab)
    document = json.dumps(result, indent=2) + "\n"
    if output:
        atomic_write_text(output, document)
    typer.echo(document)


if __name__ == "__main__":
    typer.run(main)
