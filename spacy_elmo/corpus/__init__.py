"""Embedding a corpus: lines of text in (text files, folders, Parquet), a folder of HDF5 blocks in
the ``allennlp elmo`` layout and an index out; in this process or on Ray Data, resumable.

A new output format or a new way to spread the work goes here.
"""
