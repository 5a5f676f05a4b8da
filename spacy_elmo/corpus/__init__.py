"""Embedding a corpus: lines of text in, embeddings in the ``allennlp elmo`` HDF5 layout out,
sharded and resumable.

A new output format or a new way to spread the work goes here.
"""
