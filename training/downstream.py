"""Downstream evaluation of a biLM: the paper's claims, measured. Writes metrics/downstream/*.json,
RESULTS.md and a plot of the layer weights each task learned.

    python -m training.downstream pipeline runs/elmo/bilm pipelines/elmo-downstream
    python -m training.downstream train upos 1 elmo --data corpus/downstream --elmo pipelines/elmo-downstream
    python -m training.downstream wic --elmo pipelines/elmo-downstream --data ../shared/data
    python -m training.downstream similarity --elmo pipelines/elmo-downstream --data ../shared/data
    python -m training.downstream report --bilm runs/elmo --perplexity metrics/perplexity.json

1. UPOS accuracy on UD English-EWT test with 1%, 10%, 100% of the training sentences, baseline
   vs +ELMo (training/configs/upos-*.cfg); 2. WNUT-17 entity F1 (ner-*.cfg); 3. WiC accuracy from
   ELMo alone: the cosine of the target word's vectors, per layer and for the mix, with the threshold
   tuned on dev; 4. the softmax layer weights each task learned; 5. word similarity (Spearman) on MEN,
   WS-353 and SimLex-999, layer 0 against the mixes (each word alone between <S> and </S>).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import typer

from .vocab import write_text_atomically

ROOT = Path(__file__).resolve().parents[1]
METRICS = Path("metrics/downstream")
RESULTS = ROOT / "bench" / "results"
# Training budgets per (task, size): the same for the baseline and +ELMo.
BUDGETS = {("upos", 1): (800, 50), ("upos", 10): (2000, 100), ("upos", 100): (4000, 200), ("ner", 100): (3000, 200)}
SIMILARITY_SETS = {"MEN": "EN-MEN-TR-3k.txt", "WS-353": "EN-WS-353-ALL.txt", "SimLex-999": "EN-SIMLEX-999.txt"}

app = typer.Typer(add_completion=False, no_args_is_help=True)


@app.command()
def pipeline(bilm: Path, output: Path, cache_tokens: int = typer.Option(500000, help="Sentence cache of the frozen elmo component.")) -> None:
    """A pipeline with the biLM for downstream training (sentencizer + elmo, sentence cache on)."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(bilm), "sentence_cache_tokens": cache_tokens})
    nlp.initialize()
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(output)
    config = nlp.get_pipe("elmo").bilm.config
    typer.echo(f"Saved {output}: layers {config.n_output_layers} x {config.output_dim}")


@app.command()
def train(
    task: str, size: int, variant: str,
    data: Path = typer.Option(..., help="Output of training.downstream_data."),
    elmo: Optional[Path] = typer.Option(None, help="The pipeline from the `pipeline` command (+ELMo runs)."),
    runs: Path = typer.Option(Path("runs/downstream")),
) -> None:
    """spacy train one configuration, then spacy evaluate it on the test split."""
    import spacy

    if (task, size) not in BUDGETS or variant not in ("baseline", "elmo"):
        raise typer.BadParameter(f"unknown run {task} {size} {variant}; choose from {sorted(BUDGETS)} x baseline|elmo.")
    name = f"{task}-{size}-{variant}"
    steps, frequency = BUDGETS[(task, size)]
    train_file = data / (f"upos-train-{size}.spacy" if task == "upos" else "ner-train.spacy")
    overrides = [
        "--paths.train", str(train_file), "--paths.dev", str(data / f"{task}-dev.spacy"),
        "--training.max_steps", str(steps), "--training.eval_frequency", str(frequency), "--training.patience", str(steps),
    ]
    if variant == "elmo":
        if elmo is None:
            raise typer.BadParameter("+ELMo runs need --elmo PIPELINE.")
        width = spacy.load(elmo).get_pipe("elmo").bilm.config.output_dim
        component = "tagger" if task == "upos" else "ner"
        overrides += ["--paths.elmo", str(elmo), f"--components.{component}.model.tok2vec.embed.mix.width", str(width)]
    config = ROOT / "training" / "configs" / f"{task}-{variant}.cfg"
    started = time.time()
    subprocess.run([sys.executable, "-m", "spacy", "train", str(config), "--output", str(runs / name), *overrides], check=True)
    minutes = (time.time() - started) / 60
    scores_path = METRICS / f"{name}.test.json"
    METRICS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "spacy", "evaluate", str(runs / name / "model-best"), str(data / f"{task}-test.spacy"), "--output", str(scores_path)], check=True)
    scores = json.loads(scores_path.read_text())
    result = {"task": task, "size": size, "variant": variant, "train_minutes": minutes, "max_steps": steps,
              "score": scores["tag_acc"] if task == "upos" else scores["ents_f"], "scores": scores}
    if variant == "elmo":
        result["layer_weights"], result["gamma"] = learned_mix(runs / name / "model-best")
    write_text_atomically(METRICS / f"{name}.json", json.dumps(result, indent=2) + "\n")
    typer.echo(f"{name}: {result['score']:.4f}")


def learned_mix(model_path: Path) -> Tuple[List[float], float]:
    import spacy

    from spacy_elmo.task_mix import mix_weights

    nlp = spacy.load(model_path)
    for _, component in nlp.pipeline:
        for node in component.model.walk() if hasattr(component, "model") else ():
            if node.name == "elmo_task_mix":
                weights, gamma = mix_weights(node)
                return [float(w) for w in weights], gamma
    raise ValueError(f"{model_path} has no ELMo task mix.")


def word_layers(nlp, sentences: List[List[str]]) -> List[np.ndarray]:
    """(L+1, T, 2P) per sentence, each read as one sentence."""
    from spacy.tokens import Doc

    docs = nlp.pipe(Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1)) for words in sentences)
    return [doc._.elmo_data for doc in docs]


def representations(layers: np.ndarray, mixes: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The vectors compared: each layer alone, and each mix (weights over standardized layers)."""
    from spacy_elmo.attributes import mix_layers

    out = {f"layer {j}": layers[j] for j in range(layers.shape[0])}
    for name, weights in mixes.items():
        out[name] = mix_layers(layers[:, None], {"layer_weights": list(weights), "gamma": 1.0, "layer_norm": True})[0]
    return out


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / norms) if norms else 0.0


def _mixes(n_layers: int) -> Dict[str, np.ndarray]:
    mixes = {"mix: average": np.full(n_layers, 1.0 / n_layers)}
    for path in sorted(METRICS.glob("*-elmo.json")):
        result = json.loads(path.read_text())
        if result["size"] == 100 and "layer_weights" in result:
            mixes[f"mix learned by {result['task']}"] = np.array(result["layer_weights"])
    return mixes


def read_wic(data: Path, split: str) -> Tuple[List[Tuple[List[str], int, List[str], int]], List[bool]]:
    examples = []
    for line in (data / "wic" / f"{split}.data.txt").read_text(encoding="utf-8").splitlines():
        _, _, positions, first, second = line.split("\t")
        i, j = (int(p) for p in positions.split("-"))
        examples.append((first.split(" "), i, second.split(" "), j))
    gold = [label.strip() == "T" for label in (data / "wic" / f"{split}.gold.txt").read_text().splitlines()]
    return examples, gold


@app.command()
def wic(elmo: Path = typer.Option(...), data: Path = typer.Option(...)) -> None:
    """WiC accuracy from ELMo alone: same sense when the target's vectors are more similar than a
    threshold tuned on dev; per layer and per mix."""
    import spacy

    nlp = spacy.load(elmo)
    similarities, golds = {}, {}
    for split in ("dev", "test"):
        examples, golds[split] = read_wic(data, split)
        firsts = word_layers(nlp, [e[0] for e in examples])
        seconds = word_layers(nlp, [e[2] for e in examples])
        mixes = _mixes(firsts[0].shape[0])
        per_name: Dict[str, List[float]] = {}
        for (_, i, _, j), a, b in zip(examples, firsts, seconds):
            first, second = representations(a[:, i], mixes), representations(b[:, j], mixes)
            for name in first:
                per_name.setdefault(name, []).append(_cosine(first[name], second[name]))
        similarities[split] = per_name
    result = {}
    for name, dev_scores in similarities["dev"].items():
        threshold = _best_threshold(np.array(dev_scores), np.array(golds["dev"]))
        test = np.array(similarities["test"][name]) >= threshold
        result[name] = {"threshold": threshold, "dev_accuracy": float(((np.array(dev_scores) >= threshold) == np.array(golds["dev"])).mean()),
                        "test_accuracy": float((test == np.array(golds["test"])).mean())}
    METRICS.mkdir(parents=True, exist_ok=True)
    write_text_atomically(METRICS / "wic.json", json.dumps(result, indent=2) + "\n")
    for name, scores in result.items():
        typer.echo(f"WiC {name}: test accuracy {scores['test_accuracy']:.3f}")


def _best_threshold(scores: np.ndarray, gold: np.ndarray) -> float:
    candidates = np.unique(scores)
    accuracy = [((scores >= c) == gold).mean() for c in candidates]
    return float(candidates[int(np.argmax(accuracy))])


@app.command()
def similarity(elmo: Path = typer.Option(...), data: Path = typer.Option(...)) -> None:
    """Spearman correlation of cosine similarity with human judgements, each word embedded alone."""
    import spacy
    from scipy.stats import spearmanr

    nlp = spacy.load(elmo)
    result = {}
    for name, filename in SIMILARITY_SETS.items():
        pairs = [line.split("\t") for line in (data / "word-similarity" / filename).read_text(encoding="utf-8").splitlines() if line.strip()]
        words = sorted({w for a, b, _ in pairs for w in (a, b)})
        layers = dict(zip(words, word_layers(nlp, [[w] for w in words])))
        mixes = _mixes(layers[words[0]].shape[0])
        vectors = {w: representations(layers[w][:, 0], mixes) for w in words}
        gold = [float(score) for _, _, score in pairs]
        result[name] = {
            "pairs": len(pairs),
            **{kind: float(spearmanr([_cosine(vectors[a][kind], vectors[b][kind]) for a, b, _ in pairs], gold).correlation) for kind in vectors[words[0]]},
        }
    METRICS.mkdir(parents=True, exist_ok=True)
    write_text_atomically(METRICS / "similarity.json", json.dumps(result, indent=2) + "\n")
    typer.echo(json.dumps(result, indent=2))


def describe_bilm(run: Path, perplexity: Optional[Path]) -> Dict:
    """What the report says about the biLM: its sizes, training data and perplexity."""
    config = json.loads((run / "bilm" / "config.json").read_text())["config"]
    train = json.loads((run / "train-config.json").read_text())
    last = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if "loss" in line][-1]
    info = {"run": str(run), "config": config, "train_config": train, "tokens_seen": last["tokens"], "minutes": last["elapsed"] / 60}
    text = (f"`{train['preset']}` preset ({config['n_layers']} x {config['lstm_dim']} LSTM cells, projection {config['projection_dim']}, "
            f"{sum(n for _, n in config['filters'])} char filters), pretrained for {info['minutes']:.0f} minutes on this 2-core CPU "
            f"({info['tokens_seen']:,} tokens of {train['corpus']})")
    if perplexity and Path(perplexity).exists():
        scores = json.loads(Path(perplexity).read_text())
        info["perplexity"] = scores
        text += f"; test perplexity {scores['perplexity']:.1f} (a unigram model: {scores['unigram_perplexity']:.1f})"
    info["description"] = text + "."
    return info


@app.command()
def report(bilm: Optional[Path] = typer.Option(None, help="The biLM's run directory (runs/elmo)."),
           perplexity: Optional[Path] = typer.Option(None, help="Its evaluate JSON."),
           output: Path = typer.Option(Path("RESULTS.md"))) -> None:
    """Collect metrics/downstream/*.json into RESULTS.md, bench/results/downstream.json and
    bench/results/downstream-layer-weights.png."""
    runs = {p.stem: json.loads(p.read_text()) for p in METRICS.glob("*-*-*.json") if not p.name.endswith(".test.json")}
    wic_scores = json.loads((METRICS / "wic.json").read_text()) if (METRICS / "wic.json").exists() else {}
    similarity_scores = json.loads((METRICS / "similarity.json").read_text()) if (METRICS / "similarity.json").exists() else {}
    info = describe_bilm(bilm, perplexity) if bilm else {}
    write_text_atomically(RESULTS / "downstream.json", json.dumps({"runs": runs, "wic": wic_scores, "similarity": similarity_scores, "bilm": info}, indent=2) + "\n")
    plot = _plot_weights(runs)
    write_text_atomically(output, _markdown(runs, wic_scores, similarity_scores, info, plot))
    typer.echo(f"Wrote {output}")


def _plot_weights(runs: Dict) -> Optional[Path]:
    learned = {f"{r['task'].upper()} ({r['size']}%)": r["layer_weights"] for r in runs.values() if "layer_weights" in r}
    if not learned:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
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
    path = RESULTS / "downstream-layer-weights.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _markdown(runs: Dict, wic_scores: Dict, similarity_scores: Dict, info: Dict, plot: Optional[Path]) -> str:
    lines = ["# Results: ELMo in downstream models", ""]
    if info:
        lines += [f"biLM: {info.get('description', '')}", ""]
    lines += ["## 1. UPOS accuracy on UD English-EWT test (tagger; same model, budget and seed with and without ELMo)", "",
              "| training data | baseline | +ELMo | difference |", "|---|---:|---:|---:|"]
    for size in (1, 10, 100):
        base, elmo = runs.get(f"upos-{size}-baseline"), runs.get(f"upos-{size}-elmo")
        if base and elmo:
            lines.append(f"| {size}% | {100 * base['score']:.2f} | {100 * elmo['score']:.2f} | {100 * (elmo['score'] - base['score']):+.2f} |")
    base, elmo = runs.get("ner-100-baseline"), runs.get("ner-100-elmo")
    lines += ["", "## 2. WNUT-17 entity F1 (test)", "", "| baseline | +ELMo | difference |", "|---:|---:|---:|"]
    if base and elmo:
        lines.append(f"| {100 * base['score']:.2f} | {100 * elmo['score']:.2f} | {100 * (elmo['score'] - base['score']):+.2f} |")
    lines += ["", "## 3. WiC test accuracy from ELMo alone (cosine of the target's vectors, threshold tuned on dev)", "",
              "The WiC paper's ELMo-based figure is about 57.7; chance is 50.", "", "| vectors | dev | test |", "|---|---:|---:|"]
    for name, scores in wic_scores.items():
        lines.append(f"| {name} | {100 * scores['dev_accuracy']:.1f} | {100 * scores['test_accuracy']:.1f} |")
    lines += ["", "## 4. Learned layer weights", ""]
    for run in sorted((r for r in runs.values() if "layer_weights" in r), key=lambda r: (r["task"], r["size"])):
        weights = ", ".join(f"{w:.3f}" for w in run["layer_weights"])
        lines.append(f"- {run['task'].upper()} {run['size']}%: softmax(s) = [{weights}], gamma = {run['gamma']:.3f}")
    if plot:
        lines += ["", f"![layer weights]({plot.relative_to(ROOT).as_posix()})"]
    lines += ["", "## 5. Word similarity (Spearman's rho; each word alone between <S> and </S>)", ""]
    if similarity_scores:
        kinds = [k for k in next(iter(similarity_scores.values())) if k != "pairs"]
        lines += ["| data set | pairs | " + " | ".join(kinds) + " |", "|---|---:|" + "---:|" * len(kinds)]
        for name, scores in similarity_scores.items():
            lines.append(f"| {name} | {scores['pairs']} | " + " | ".join(f"{scores[k]:.3f}" for k in kinds) + " |")
    lines += ["", "Reproduce: `spacy project run downstream` (see project.yml), or the commands at the top of training/downstream.py.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    app()
