"""A trained biLM as a spaCy pipeline (project.yml: assemble, package, demo).

- assemble: blank pipeline of the language + sentencizer + elmo with the biLM, saved to disk
  (``spacy package`` then builds the wheel).
- demo: installs the packaged wheel and shows what ELMo does: neighbours of polysemous words in
  context, sentence similarities.
"""
