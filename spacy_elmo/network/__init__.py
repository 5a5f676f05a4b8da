"""The network: the biLM of Peters et al. (2018) as torch modules, its configuration, how tokens
become char ids, the LSTM runners, and the plain-Python entry point (``embed_sentences``).

A new layer of the biLM, a new preset or a new way to run the LSTMs goes here.
"""
