"""ELMo behind HTTP: ``python -m spacy_elmo serve`` (``service``, which picks an engine:
``process_engine`` or ``ray_engine``): a gateway (``gateway``) in front of embedding replicas
(``embedder``, batching with ``batcher``), reading requests (``requests``, ``openai_api``), writing
responses (``responses``) and metrics (``metrics``); settings in ``settings``."""
