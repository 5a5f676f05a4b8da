"""The network: the biLM of Peters et al. (2018) as torch modules (its config and parameters: data),
how tokens become char ids, the one forward pass of each part, and what runs it for inference
(``BiLMRunner``, with the plain-Python entry point ``embed_sentences``).

A new layer of the biLM or a new preset goes here.
"""
