"""Pretraining a biLM on raw text, and what comes after it (see project.yml).

The pretraining workflow, one command module per step: builtin_text (text to train on) -> corpus
(sentence shards) -> vocab (the LM head's words) -> pretrain (``launch`` runs it on N GPUs) ->
evaluate (held-out perplexity). Pretraining itself: train_config (settings), processes (one per
device), session (setup, resume, checkpoints), step (one optimizer step), batching (data streams),
objective (the loss and perplexity), softmax, optimizers, random_state, checkpoint, run_log and
curve (the log and its plot), lm_head (building the head, stripping it from the final weights).

Subpackages: ``packaging`` (a pipeline around the biLM, and a demo of the packaged wheel) and
``downstream`` (the biLM in task models: the paper's claims, measured).
"""
