"""Downstream evaluation of a biLM: the paper's claims, measured (project.yml workflow
``downstream``). Each step is a command module, run as ``python -m spacy_elmo.training.downstream.MODULE``:

- assets: the data from its public URLs (project.yml's assets) when ../shared/data is absent: unpacks
  the WiC zip and checks that the folder holds every file the workflow reads.
- data: the task data as spaCy DocBins (UPOS from CoNLL-U, entities from WNUT-17 style files;
  nested training subsets) and the tasks' unlabeled text as a corpus for fine-tuning the biLM.
- pipeline: the biLM as the frozen elmo component the task models train with.
- tasks: ``spacy train`` runs, baseline vs +ELMo, scored on test, mean over seeds.
- wic: WiC accuracy from ELMo alone, per layer and per mix.
- similarity: word similarity (Spearman) per layer and per mix.
- precision: UPOS at 1% with the frozen elmo component in fp32, bf16 and int8 (same seeds).
- report: RESULTS.md, bench/results/downstream.json and the plot of the learned layer weights.

Shared: metrics (where scores go, metrics/downstream/) and vectors (the ELMo vectors of words, the
mixes compared).
"""
