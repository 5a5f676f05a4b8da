"""The spaCy side: the ``elmo`` component, the extensions and vector hooks it sets, what a doc
stores, centring, the layer mix, the task mixes of later components and how they listen, the
thinc layer around the biLM, and assembling and packaging pipelines.

A new pooling, a new extension attribute or a new task architecture goes here.
"""
