"""Training task models with ELMo in ``spacy train``: task data, the source pipeline, the shipped
configs (``python -m spacy_elmo conllu | pipeline | config``)."""
