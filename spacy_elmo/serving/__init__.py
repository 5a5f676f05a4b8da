"""ELMo behind HTTP: ``python -m spacy_elmo serve`` (``service``): a gateway (``gateway``) in front
of embedding replicas (``embedder``, batching with ``batcher``), reading requests (``requests``,
``openai_api``), writing responses (``responses``) and metrics (``metrics``); settings in ``settings``."""
