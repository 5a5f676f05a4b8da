"""The report of the downstream evaluation: metrics/downstream/*.json (spacy_elmo.training.downstream.tasks,
wic, similarity) and what the biLM is (its run's config, log and perplexity) into RESULTS.md,
bench/results/downstream.json and a plot of the layer weights each task learned.

    python -m spacy_elmo.training.downstream.report --bilm runs/elmo --perplexity metrics/perplexity.json
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import typer

from spacy_elmo.files import atomic_write_text
from spacy_elmo.kernels.machine import cpu_description

from ..loop.curve import plots_here
from .metrics import METRICS, load_metrics, pyplot, save_plot

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def _shown(path: str) -> str:
    """A path as the reader can use it: relative to the repository when inside it or beside it."""
    relative = os.path.relpath(os.path.abspath(path), ROOT)  # a link inside the repository is shown as such
    return relative if not relative.startswith(os.path.join("..", "..")) else str(path)


def _corpus_origin(corpus: Path) -> str:
    """The corpus directory, and the text files its training split was made from."""
    manifest = corpus / "manifest.json"
    sources = (
        json.loads(manifest.read_text())["splits"].get("train", {}).get("sources", []) if manifest.exists() else []
    )
    return _shown(str(corpus)) + (f", made from {', '.join(_shown(s) for s in sources)}" if sources else "")


def _run_summary(run: Path) -> Tuple[Dict, Dict, Dict]:
    """A training run's report entry, its training config, and its last logged step."""
    train = json.loads((run / "train-config.json").read_text())
    last = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if "loss" in line][-1]
    return (
        {"run": str(run), "train_config": train, "tokens_seen": last["tokens"], "minutes": last["elapsed"] / 60},
        train,
        last,
    )


def describe_bilm(run: Path, perplexity: Optional[Path]) -> Dict:
    """What the report says about the biLM: its sizes, training data and perplexity."""
    config = json.loads((run / "bilm" / "config.json").read_text())["config"]
    info, train, _ = _run_summary(run)
    info["config"] = config
    text = (
        f"`{train['preset']}` preset ({config['n_layers']} x {config['lstm_dim']} LSTM cells, projection "
        f"{config['projection_dim']}, "
        f"{sum(n for _, n in config['filters'])} char filters), pretrained for {info['minutes']:.0f} minutes "
        f"({info['tokens_seen']:,} tokens of {_corpus_origin(Path(train['corpus']))}); this report was written on "
        f"{cpu_description()}"
    )
    if perplexity and Path(perplexity).exists():
        scores = json.loads(Path(perplexity).read_text())
        info["perplexity"] = scores
        text += f"; test perplexity {scores['perplexity']:.1f} (a unigram model: {scores['unigram_perplexity']:.1f})"
    info["description"] = text + "."
    return info


def describe_finetuning(run: Path, perplexity: Optional[Path], before: Optional[Path]) -> Dict:
    """What the report says about fine-tuning the biLM on the tasks' unlabeled text."""
    info, train, last = _run_summary(run)
    manifest = json.loads((Path(train["corpus"]) / "manifest.json").read_text())
    text = (
        f"Then fine-tuned for {info['minutes']:.0f} minutes ({last['step']} steps, {last['tokens']:,} tokens) on the "
        "tasks' "
        f"unlabeled training text ({manifest['splits']['train']['tokens']:,} tokens of EWT + WNUT train; the paper's "
        "section 3.4), "
        f"and frozen"
    )
    if perplexity and Path(perplexity).exists():
        info["perplexity"] = json.loads(Path(perplexity).read_text())
        text += f"; perplexity on the tasks' test text {info['perplexity']['perplexity']:.1f}"
        if before and Path(before).exists():
            info["perplexity_before"] = json.loads(Path(before).read_text())
            text += f" (before fine-tuning {info['perplexity_before']['perplexity']:.1f})"
    info["description"] = text + "."
    return info


def main(
    bilm: Optional[Path] = typer.Option(None, help="The biLM's run directory (runs/elmo)."),
    perplexity: Optional[Path] = typer.Option(None, help="Its evaluate JSON."),
    task_bilm: Optional[Path] = typer.Option(None, help="The run that fine-tuned it on the tasks' text, if any."),
    task_perplexity: Optional[Path] = typer.Option(None, help="That run's evaluate JSON on the tasks' test text."),
    task_perplexity_before: Optional[Path] = typer.Option(None, help="The pretrained biLM's, on the same text."),
    output: Path = typer.Option(Path("RESULTS.md")),
    results: Path = typer.Option(RESULTS, help="Where downstream.json and the plot go."),
    recorded: Optional[Path] = typer.Option(
        None, help="A downstream.json written before: its runs, scores and biLM stand in for those not here."
    ),
) -> None:
    """Collect metrics/downstream/*.json into RESULTS.md, bench/results/downstream.json and
    bench/results/downstream-layer-weights.png."""
    drawing = plots_here("downstream.report writes its results")
    record = json.loads(recorded.read_text()) if recorded else {}
    runs = {p.stem: json.loads(p.read_text()) for p in METRICS.glob("*-*-*.json") if not p.name.endswith(".test.json")}
    runs = {name: run for name, run in runs.items() if run.get("precision", "fp32") == "fp32"}  # bf16, int8: section 7
    runs = runs or record.get("runs", {})
    wic_scores = load_metrics("wic") or record.get("wic", {})
    similarity_scores = load_metrics("similarity") or record.get("similarity", {})
    centering = load_metrics("centering") or record.get("centering", {})
    precision = load_metrics("precision") or record.get("precision", {})
    info = describe_bilm(bilm, perplexity) if bilm else record.get("bilm", {})
    if task_bilm:
        info["finetuning"] = describe_finetuning(task_bilm, task_perplexity, task_perplexity_before)
        info["description"] = f"{info.get('description', '')} {info['finetuning']['description']}".strip()
    results.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        results / "downstream.json",
        json.dumps(
            {
                "runs": runs,
                "wic": wic_scores,
                "similarity": similarity_scores,
                "centering": centering,
                "precision": precision,
                "bilm": info,
            },
            indent=2,
        )
        + "\n",
    )
    plot = _plot_weights(runs, results / "downstream-layer-weights.png") if drawing else None
    text = _markdown(runs, wic_scores, similarity_scores, info, plot, output.parent)
    if centering:
        text += centering_section(centering, results / "downstream-centering.png", output.parent)
    if precision:
        text += precision_section(precision, results / "downstream-precision.png", output.parent)
    atomic_write_text(output, text)
    typer.echo(f"Wrote {output}")


def _plot_weights(runs: Dict, path: Path) -> Optional[Path]:
    learned = {f"{r['task'].upper()} ({r['size']}%)": r["layer_weights"] for r in runs.values() if "layer_weights" in r}
    if not learned:
        return None
    fig, ax = pyplot().subplots(figsize=(7, 3.8))
    n_layers = len(next(iter(learned.values())))
    bar = 0.8 / len(learned)
    for k, (name, weights) in enumerate(sorted(learned.items())):
        ax.bar(np.arange(n_layers) + k * bar, weights, bar, label=name)
    ax.axhline(1 / n_layers, color="grey", linestyle=":", label="plain average")
    ax.set_xticks(np.arange(n_layers) + bar * (len(learned) - 1) / 2)
    ax.set_xticklabels(["layer 0 (char CNN)"] + [f"LSTM layer {j}" for j in range(1, n_layers)])
    ax.set_ylabel("softmax(s_task)")
    ax.set_title("Layer weights learned by each task (cf. Figure 2 of the paper)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_plot(fig, path)


def _reproduce(info: Dict) -> str:
    run = _shown(info.get("run", "runs/elmo"))
    text = f"Reproduce: `python -m spacy project run downstream . --vars.run {run}` (see project.yml)"
    if run.startswith("bench/out/run-"):
        text += ", after `python bench/pretrain.py perplexity` made that biLM"
    return text + "; each command is also at the top of its module in training/downstream/."


def _score(run: Dict) -> str:
    seeds = run.get("seed_scores", [run["score"]])
    return f"{100 * run['score']:.2f}" + (f" ± {100 * run['score_std']:.2f}" if len(seeds) > 1 else "")


def _seeds(*compared: Dict) -> str:
    return "/".join(sorted({str(len(run.get("seed_scores", [0]))) for run in compared}))


def _markdown(
    runs: Dict, wic_scores: Dict, similarity_scores: Dict, info: Dict, plot: Optional[Path], home: Path
) -> str:
    lines = ["# Results: ELMo in downstream models", ""]
    if info:
        lines += [f"biLM: {info.get('description', '')}", ""]
    lines += [
        "## 1. UPOS accuracy on UD English-EWT test (tagger; same model, budget and seeds with and without ELMo)",
        "",
        "Mean over seeds (± sample standard deviation); the model of each seed is the best on dev.",
        "",
        "| training data | seeds | baseline | +ELMo | difference |",
        "|---|---:|---:|---:|---:|",
    ]
    for size in (1, 10, 100):
        base, elmo = runs.get(f"upos-{size}-baseline"), runs.get(f"upos-{size}-elmo")
        if base and elmo:
            lines.append(
                f"| {size}% | {_seeds(base, elmo)} | {_score(base)} | {_score(elmo)} | "
                f"{100 * (elmo['score'] - base['score']):+.2f} |"
            )
    base, elmo = runs.get("ner-100-baseline"), runs.get("ner-100-elmo")
    lines += [
        "",
        "## 2. WNUT-17 entity F1 (test)",
        "",
        "| seeds | baseline | +ELMo | difference |",
        "|---:|---:|---:|---:|",
    ]
    if base and elmo:
        lines.append(
            f"| {_seeds(base, elmo)} | {_score(base)} | {_score(elmo)} | {100 * (elmo['score'] - base['score']):+.2f} |"
        )
    lines += [
        "",
        "## 3. WiC test accuracy from ELMo alone (cosine of the target's vectors, threshold tuned on dev)",
        "",
        "The WiC paper's ELMo-based figure is about 57.7; chance is 50.",
        "",
        "| vectors | dev | test |",
        "|---|---:|---:|",
    ]
    for name, scores in wic_scores.items():
        lines.append(f"| {name} | {100 * scores['dev_accuracy']:.1f} | {100 * scores['test_accuracy']:.1f} |")
    lines += ["", "## 4. Learned layer weights", ""]
    for run in sorted((r for r in runs.values() if "layer_weights" in r), key=lambda r: (r["task"], r["size"])):
        weights = ", ".join(f"{w:.3f}" for w in run["layer_weights"])
        lines.append(f"- {run['task'].upper()} {run['size']}%: softmax(s) = [{weights}], gamma = {run['gamma']:.3f}")
    if plot:
        lines += ["", f"![layer weights]({Path(os.path.relpath(plot.resolve(), home.resolve())).as_posix()})"]
    lines += ["", "## 5. Word similarity (Spearman's rho; each word alone between <S> and </S>)", ""]
    if similarity_scores:
        kinds = [k for k in next(iter(similarity_scores.values())) if k != "pairs"]
        lines += ["| data set | pairs | " + " | ".join(kinds) + " |", "|---|---:|" + "---:|" * len(kinds)]
        for name, scores in similarity_scores.items():
            lines.append(f"| {name} | {scores['pairs']} | " + " | ".join(f"{scores[k]:.3f}" for k in kinds) + " |")
    lines += ["", _reproduce(info), ""]
    return "\n".join(lines)


def centering_section(result: Dict, plot: Path, home: Path) -> str:
    """Section 6: raw against centred vectors (spacy_elmo.training.downstream.centering), from the same biLM."""
    corrections, sets = list(result["wic"]), list(result["similarity"])
    kind = "mix: average"
    lines = [
        "## 6. Similarity with the common direction removed (raw against centred vectors, same biLM)",
        "",
        f"For each kind of vector the mean, and the top D principal directions of the centred vectors, are estimated "
        f"from {result['tokens']:,} tokens of {_shown(result['text'])} (the component's `center_vectors` and "
        "`remove_directions` settings; spacy_elmo/pipeline/centering.py), then WiC and word similarity are measured "
        "as in "
        "sections 3 and 5. Random-pair cosine: the mean cosine of 5,000 random pairs of tokens of that text. "
        + _verdict(result, kind),
        "",
        *([f"Vectors from {_shown(result['pipeline'])}: {result['note']}", ""] if result.get("note") else []),
        f"### {kind} (what `token.vector` and `.similarity` give with the default mix)",
        "",
        "| vectors | random-pair cosine | WiC dev | WiC test | " + " | ".join(sets) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(sets),
    ]
    for name in corrections:
        wic = result["wic"][name][kind]
        cells = [
            f"{result['anisotropy'][name][kind]:.3f}",
            f"{100 * wic['dev_accuracy']:.1f}",
            f"{100 * wic['test_accuracy']:.1f}",
            *(f"{result['similarity'][s][name][kind]:.3f}" for s in sets),
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    centred = corrections[1]
    lines += [
        "",
        f"### Every kind of vector: raw -> {centred}",
        "",
        "| vectors | random-pair cosine | WiC test | " + " | ".join(sets) + " |",
        "|---|---:|---:|" + "---:|" * len(sets),
    ]
    for each in result["wic"]["raw"]:
        wic = {name: result["wic"][name][each]["test_accuracy"] for name in ("raw", centred)}
        cells = [
            _change(result["anisotropy"]["raw"][each], result["anisotropy"][centred][each], "{:.3f}"),
            _change(100 * wic["raw"], 100 * wic[centred], "{:.1f}"),
            *(_change(by["raw"][each], by[centred][each], "{:.3f}") for by in result["similarity"].values()),
        ]
        lines.append(f"| {each} | " + " | ".join(cells) + " |")
    if plot.exists():
        lines += ["", f"![raw against centred]({Path(os.path.relpath(plot.resolve(), home.resolve())).as_posix()})"]
    return "\n".join(lines + [""])


def _verdict(result: Dict, kind: str) -> str:
    """Whether removing the mean scores better than the raw vectors of ``kind``: on WiC test and
    on most word-similarity sets."""
    centred = "mean removed"
    wic = {name: result["wic"][name][kind]["test_accuracy"] for name in ("raw", centred)}
    sets = result["similarity"].values()
    better_sets = sum(scores[centred][kind] > scores["raw"][kind] for scores in sets)
    better = wic[centred] > wic["raw"] and better_sets > len(sets) / 2
    return (
        f"With the mean removed, {kind} scores {'better' if better else 'no better'} than raw: WiC test "
        f"{100 * wic['raw']:.1f} -> {100 * wic[centred]:.1f}, higher on {better_sets} of {len(sets)} word-similarity "
        f"sets; the component's default (`center_vectors = {'true' if better else 'false'}`) follows from this."
    )


def precision_section(result: Dict, plot: Path, home: Path) -> str:
    """Section 7: UPOS at 1% with the elmo component in each precision (spacy_elmo.training.downstream.precision)."""
    per_precision = result["precisions"]
    seeds = _seeds(*per_precision.values())
    lines = [
        "## 7. UPOS at 1% with reduced-precision ELMo",
        "",
        f"The +ELMo tagger of section 1 at {result['size']}% of the training data, trained and evaluated with the "
        "frozen elmo component's matmuls in each precision (its `precision` setting; spacy_elmo/kernels/precision.py), "
        "by "
        "training/downstream/precision.py (the workflow's `downstream-precision`). "
        f"The same biLM pipeline ({_shown(result['pipeline'])}), data, training budget and seeds were used for all "
        f"{len(per_precision)} precisions; only the precision differs, in training and in evaluation. Mean over seeds "
        "(± sample standard deviation); training minutes: `spacy train` of one seed, on a machine shared with other "
        "work. " + _precision_verdict(per_precision),
        "",
        *([f"Pipeline {_shown(result['pipeline'])}: {result['note']}", ""] if result.get("note") else []),
        "| precision | seeds | UPOS test accuracy | difference to fp32 | seed scores | training minutes per seed |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for name, entry in per_precision.items():
        scores = ", ".join(f"{100 * s:.2f}" for s in entry["seed_scores"])
        timed = [m for m in entry["train_minutes"] if m is not None]
        minutes = f"{np.mean(timed):.1f}" if timed else "-"
        lines.append(
            f"| {name} | {seeds} | {_score(entry)} | {entry['difference_points']:+.2f} | {scores} | {minutes} |"
        )
    if plot.exists():
        lines += ["", f"![precision]({Path(os.path.relpath(plot.resolve(), home.resolve())).as_posix()})"]
    return "\n".join(lines + [""])


def _precision_verdict(per_precision: Dict) -> str:
    """For each reduced precision, whether its mean is within the seed-to-seed spread of fp32's:
    the difference of the means against the larger of the two sample standard deviations."""
    reference = per_precision["fp32"]
    if len(reference["seed_scores"]) < 2:
        return "With one seed there is no seed-to-seed spread to compare the differences with."
    clauses, lower, higher = [], [], []
    for name, entry in per_precision.items():
        if name == "fp32":
            continue
        difference = entry["difference_points"]
        spread = 100 * max(reference["score_std"], entry["score_std"])
        if abs(difference) <= spread:
            clauses.append(f"{name} {difference:+.2f} points, within the spread ({spread:.2f})")
        else:
            (lower if difference < 0 else higher).append(name)
            side = "lower" if difference < 0 else "higher"
            clauses.append(f"{name} {difference:+.2f} points, {side} by more than the spread ({spread:.2f})")
    if not lower and not higher:
        conclusion = "reduced precision costs no UPOS accuracy that can be told from seed-to-seed variation."
    else:
        verbs = ((lower, "cost"), (higher, "gain"))
        parts = [f"{' and '.join(names)} {verb}{'' if len(names) > 1 else 's'}" for names, verb in verbs if names]
        conclusion = f"{'; '.join(parts)} accuracy beyond seed-to-seed variation."
    return (
        "Against fp32 (the spread: the larger sample standard deviation of the two): "
        + "; ".join(clauses)
        + f". With these seeds, {conclusion}"
    )


def _change(before: float, after: float, form: str) -> str:
    return f"{form.format(before)} -> {form.format(after)}"


if __name__ == "__main__":
    typer.run(main)
