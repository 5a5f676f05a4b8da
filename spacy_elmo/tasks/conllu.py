"""Universal Dependencies CoNLL-U files as spaCy docs for a tagger: each sentence one doc, each
syntactic word a token with its UPOS as ``tag_``; and the scorer that reports the tagger's accuracy
on them under its own name, ``upos_acc`` (``spacy-elmo.upos_scorer.v1``).

spaCy's own ``spacy convert`` puts a CoNLL-U file's XPOS (English-EWT: Penn Treebank tags) in
``tag_`` and its UPOS in ``pos_``; the tagger learns ``tag_``, so the shipped UPOS configs read the
docs made here. Multiword token lines (``3-4``) and empty nodes (``8.1``) are skipped: the syntactic
words are the tokens, and a word's ``SpaceAfter=No`` is kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Union

from spacy.scorer import Scorer
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import registry
from spacy.vocab import Vocab

WORD_COLUMNS = 10  # ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC


@registry.scorers("spacy-elmo.upos_scorer.v1")
def make_upos_scorer() -> Callable[..., Dict[str, Any]]:
    """The tagger's accuracy on ``tag_`` (UPOS, as read here) as ``upos_acc``: what `spacy train`
    prints and what the configs' ``score_weights`` weigh."""

    def score(examples: Iterable[Example], **options: Any) -> Dict[str, Any]:
        return {"upos_acc": Scorer.score_token_attr(list(examples), "tag", **options)["tag_acc"]}

    return score


class ConlluError(ValueError):
    """A CoNLL-U file that cannot be read as such."""


def conllu_docs(path: Path, vocab: Vocab) -> List[Doc]:
    """The sentences of the CoNLL-U file at ``path``, one doc each, UPOS as ``tag_``."""
    docs: List[Doc] = []
    words: List[str] = []
    tags: List[str] = []
    spaces: List[bool] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            if words:
                docs.append(_tagged(vocab, words, tags, spaces))
                words, tags, spaces = [], [], []
            continue
        if line.startswith("#"):
            continue
        columns = line.split("\t")
        if len(columns) != WORD_COLUMNS:
            raise ConlluError(
                f"{path}, line {number}: a CoNLL-U word line has {WORD_COLUMNS} tab-separated columns, this one "
                f"{len(columns)}: {line[:80]!r}. Is this a CoNLL-U file (.conllu)?"
            )
        if "-" in columns[0] or "." in columns[0]:
            continue  # multiword ranges and empty nodes
        words.append(columns[1])
        tags.append(columns[3])
        spaces.append("SpaceAfter=No" not in columns[9])
    if words:
        docs.append(_tagged(vocab, words, tags, spaces))
    return docs


def _tagged(vocab: Vocab, words: List[str], tags: List[str], spaces: List[bool]) -> Doc:
    starts: List[Union[bool, int, None]] = [index == 0 for index in range(len(words))]
    doc = Doc(vocab, words=words, spaces=spaces, sent_starts=starts)
    for token, tag in zip(doc, tags, strict=True):
        token.tag_ = tag
    return doc
