"""Published models: the catalogue of names, checked and resumable downloads, and the cache that
turns a name or URL into a native biLM directory once.

A new model source or catalogue entry goes here.
"""
