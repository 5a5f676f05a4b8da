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
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import typer

from spacy_elmo.io import atomic_write_text

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
    seeds: int = typer.Option(1, help="Train with seeds 0..N-1; the score is their mean test score."),
) -> None:
    """spacy train one configuration (once per seed), then spacy evaluate each model on the test split.
    A seed whose model and test scores exist already is not trained again."""
    if (task, size) not in BUDGETS or variant not in ("baseline", "elmo"):
        raise typer.BadParameter(f"unknown run {task} {size} {variant}; choose from {sorted(BUDGETS)} x baseline|elmo.")
    if variant == "elmo" and elmo is None:
        raise typer.BadParameter("+ELMo runs need --elmo PIPELINE.")
    if seeds < 1:
        raise typer.BadParameter(f"--seeds must be at least 1, got {seeds}.")
    name = f"{task}-{size}-{variant}"
    per_seed = [_train_seed(task, size, variant, data, elmo, runs, seed) for seed in range(seeds)]
    test_scores = [scores["tag_acc"] if task == "upos" else scores["ents_f"] for scores, _ in per_seed]
    result = {"task": task, "size": size, "variant": variant, "max_steps": BUDGETS[(task, size)][0],
              "score": float(np.mean(test_scores)), "score_std": float(np.std(test_scores, ddof=1)) if seeds > 1 else 0.0,
              "seed_scores": test_scores, "train_minutes": [minutes for _, minutes in per_seed], "scores": per_seed[0][0]}
    if variant == "elmo":
        mixes = [learned_mix(_run_dir(runs, name, seed) / "model-best") for seed in range(seeds)]
        result["layer_weights"] = [float(w) for w in np.mean([weights for weights, _ in mixes], axis=0)]
        result["gamma"] = float(np.mean([gamma for _, gamma in mixes]))
    atomic_write_text(METRICS / f"{name}.json", json.dumps(result, indent=2) + "\n")
    typer.echo(f"{name}: {result['score']:.4f} (seeds: {', '.join(f'{s:.4f}' for s in test_scores)})")


def _run_dir(runs: Path, name: str, seed: int) -> Path:
    return runs / (name if seed == 0 else f"{name}-seed{seed}")


def _train_seed(task: str, size: int, variant: str, data: Path, elmo: Optional[Path], runs: Path, seed: int) -> Tuple[Dict, Optional[float]]:
    """(spacy evaluate's test scores, training minutes or None when reused) of one seed."""
    import spacy

    name = f"{task}-{size}-{variant}"
    output, scores_path = _run_dir(runs, name, seed), METRICS / "seeds" / f"{name}-seed{seed}.test.json"
    minutes = None
    if not (scores_path.exists() and (output / "model-best").exists()):
        steps, frequency = BUDGETS[(task, size)]
        train_file = data / (f"upos-train-{size}.spacy" if task == "upos" else "ner-train.spacy")
        overrides = [
            "--paths.train", str(train_file), "--paths.dev", str(data / f"{task}-dev.spacy"), "--system.seed", str(seed),
            "--training.max_steps", str(steps), "--training.eval_frequency", str(frequency), "--training.patience", str(steps),
        ]
        if variant == "elmo":
            width = spacy.load(elmo).get_pipe("elmo").bilm.config.output_dim
            component = "tagger" if task == "upos" else "ner"
            overrides += ["--paths.elmo", str(elmo), f"--components.{component}.model.tok2vec.embed.mix.width", str(width)]
        config = ROOT / "training" / "configs" / f"{task}-{variant}.cfg"
        started = time.time()
        subprocess.run([sys.executable, "-m", "spacy", "train", str(config), "--output", str(output), *overrides], check=True)
        minutes = (time.time() - started) / 60
        scores_path.parent.mkdir(parents=True, exist_ok=True)
        evaluate = [sys.executable, "-m", "spacy", "evaluate", str(output / "model-best"), str(data / f"{task}-test.spacy"), "--output", str(scores_path)]
        subprocess.run(evaluate, check=True)
    return json.loads(scores_path.read_text()), minutes


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
    atomic_write_text(METRICS / "wic.json", json.dumps(result, indent=2) + "\n")
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
    atomic_write_text(METRICS / "similarity.json", json.dumps(result, indent=2) + "\n")
    typer.echo(json.dumps(result, indent=2))


def _shown(path: str) -> str:
    """A path as the reader can use it: relative to the repository when inside it or beside it."""
    relative = os.path.relpath(Path(path).resolve(), ROOT)
    return relative if not relative.startswith(os.path.join("..", "..")) else str(path)


def _corpus_origin(corpus: Path) -> str:
    """The corpus directory, and the text files its training split was made from."""
    manifest = corpus / "manifest.json"
    sources = json.loads(manifest.read_text())["splits"].get("train", {}).get("sources", []) if manifest.exists() else []
    return _shown(str(corpus)) + (f", made from {', '.join(_shown(s) for s in sources)}" if sources else "")


def _run_summary(run: Path) -> Tuple[Dict, Dict, Dict]:
    """A training run's report entry, its training config, and its last logged step."""
    train = json.loads((run / "train-config.json").read_text())
    last = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if "loss" in line][-1]
    return {"run": str(run), "train_config": train, "tokens_seen": last["tokens"], "minutes": last["elapsed"] / 60}, train, last


def describe_bilm(run: Path, perplexity: Optional[Path]) -> Dict:
    """What the report says about the biLM: its sizes, training data and perplexity."""
    config = json.loads((run / "bilm" / "config.json").read_text())["config"]
    info, train, _ = _run_summary(run)
    info["config"] = config
    text = (f"`{train['preset']}` preset ({config['n_layers']} x {config['lstm_dim']} LSTM cells, projection {config['projection_dim']}, "
            f"{sum(n for _, n in config['filters'])} char filters), pretrained for {info['minutes']:.0f} minutes on this 2-core CPU "
            f"({info['tokens_seen']:,} tokens of {_corpus_origin(Path(train['corpus']))})")
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
    text = (f"Then fine-tuned for {info['minutes']:.0f} minutes ({last['step']} steps, {last['tokens']:,} tokens) on the tasks' "
            f"unlabeled training text ({manifest['splits']['train']['tokens']:,} tokens of EWT + WNUT train; the paper's section 3.4), "
            f"and frozen")
    if perplexity and Path(perplexity).exists():
        info["perplexity"] = json.loads(Path(perplexity).read_text())
        text += f"; perplexity on the tasks' test text {info['perplexity']['perplexity']:.1f}"
        if before and Path(before).exists():
            info["perplexity_before"] = json.loads(Path(before).read_text())
            text += f" (before fine-tuning {info['perplexity_before']['perplexity']:.1f})"
    info["description"] = text + "."
    return info


@app.command()
def report(bilm: Optional[Path] = typer.Option(None, help="The biLM's run directory (runs/elmo)."),
           perplexity: Optional[Path] = typer.Option(None, help="Its evaluate JSON."),
           task_bilm: Optional[Path] = typer.Option(None, help="The run that fine-tuned it on the tasks' text, if any."),
           task_perplexity: Optional[Path] = typer.Option(None, help="That run's evaluate JSON on the tasks' test text."),
           task_perplexity_before: Optional[Path] = typer.Option(None, help="The pretrained biLM's, on the same text."),
           output: Path = typer.Option(Path("RESULTS.md")),
           results: Path = typer.Option(RESULTS, help="Where downstream.json and the plot go.")) -> None:
    """Collect metrics/downstream/*.json into RESULTS.md, bench/results/downstream.json and
    bench/results/downstream-layer-weights.png."""
    runs = {p.stem: json.loads(p.read_text()) for p in METRICS.glob("*-*-*.json") if not p.name.endswith(".test.json")}
    wic_scores = json.loads((METRICS / "wic.json").read_text()) if (METRICS / "wic.json").exists() else {}
    similarity_scores = json.loads((METRICS / "similarity.json").read_text()) if (METRICS / "similarity.json").exists() else {}
    info = describe_bilm(bilm, perplexity) if bilm else {}
    if task_bilm:
        info["finetuning"] = describe_finetuning(task_bilm, task_perplexity, task_perplexity_before)
        info["description"] = f"{info.get('description', '')} {info['finetuning']['description']}".strip()
    results.mkdir(parents=True, exist_ok=True)
    atomic_write_text(results / "downstream.json", json.dumps({"runs": runs, "wic": wic_scores, "similarity": similarity_scores, "bilm": info}, indent=2) + "\n")
    plot = _plot_weights(runs, results / "downstream-layer-weights.png")
    atomic_write_text(output, _markdown(runs, wic_scores, similarity_scores, info, plot, output.parent))
    typer.echo(f"Wrote {output}")


def _plot_weights(runs: Dict, path: Path) -> Optional[Path]:
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _reproduce(info: Dict) -> str:
    run = _shown(info.get("run", "runs/elmo"))
    text = f"Reproduce: `python -m spacy project run downstream . --vars.run {run}` (see project.yml)"
    if run.startswith("bench/out/run-"):
        text += ", after `python bench/bench_pretrain.py` made that biLM"
    return text + "; each command is also at the top of training/downstream.py."


def _score(run: Dict) -> str:
    seeds = run.get("seed_scores", [run["score"]])
    return f"{100 * run['score']:.2f}" + (f" ± {100 * run['score_std']:.2f}" if len(seeds) > 1 else "")


def _seeds(*compared: Dict) -> str:
    return "/".join(sorted({str(len(run.get("seed_scores", [0]))) for run in compared}))


def _markdown(runs: Dict, wic_scores: Dict, similarity_scores: Dict, info: Dict, plot: Optional[Path], home: Path) -> str:
    lines = ["# Results: ELMo in downstream models", ""]
    if info:
        lines += [f"biLM: {info.get('description', '')}", ""]
    lines += ["## 1. UPOS accuracy on UD English-EWT test (tagger; same model, budget and seeds with and without ELMo)", "",
              "Mean over seeds (± sample standard deviation); the model of each seed is the best on dev.", "",
              "| training data | seeds | baseline | +ELMo | difference |", "|---|---:|---:|---:|---:|"]
    for size in (1, 10, 100):
        base, elmo = runs.get(f"upos-{size}-baseline"), runs.get(f"upos-{size}-elmo")
        if base and elmo:
            lines.append(f"| {size}% | {_seeds(base, elmo)} | {_score(base)} | {_score(elmo)} | {100 * (elmo['score'] - base['score']):+.2f} |")
    base, elmo = runs.get("ner-100-baseline"), runs.get("ner-100-elmo")
    lines += ["", "## 2. WNUT-17 entity F1 (test)", "", "| seeds | baseline | +ELMo | difference |", "|---:|---:|---:|---:|"]
    if base and elmo:
        lines.append(f"| {_seeds(base, elmo)} | {_score(base)} | {_score(elmo)} | {100 * (elmo['score'] - base['score']):+.2f} |")
    lines += ["", "## 3. WiC test accuracy from ELMo alone (cosine of the target's vectors, threshold tuned on dev)", "",
              "The WiC paper's ELMo-based figure is about 57.7; chance is 50.", "", "| vectors | dev | test |", "|---|---:|---:|"]
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


if __name__ == "__main__":
    app()
