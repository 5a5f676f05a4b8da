"""What ``spacy_elmo.training.pretrain`` runs: its config, processes, session, steps, batches, objective,
softmaxes, optimizers, checkpoints, logs and learning curve. A new optimizer, softmax or loss goes here."""
