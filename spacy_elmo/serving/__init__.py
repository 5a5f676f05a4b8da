"""ELMo behind HTTP: ``python -m spacy_elmo serve`` (``service``), reading requests (``requests``)
and writing responses (``responses``) apart from the engine that carries them."""
