"""What the benchmark scripts in bench/ share (a package, not a script: nothing here measures).

- ``timing``: how every figure is timed: a warm-up, repeats, the median and the spread.
- ``report``: where results, working files and BENCHMARKS.md are; the machine a figure names; a
  script's section of BENCHMARKS.md; the worker processes each configuration runs in.
- ``workloads``: the sentences every script measures (the fixture's and real text), the converted
  full-size weights, and ``nlp.pipe`` timed over a workload.
- ``peer``: AllenNLP's `Elmo` in its own virtual environment (``allennlp_side.py`` is what runs there).
"""
