"""Estimating the elmo component's centring from text: which docs to read (the initialization
examples, a text file, or docs given to ``fit_centering``) and the estimate from their mixed
vectors (see ``centering`` for the arithmetic). The component keeps the result in its
``WeightsRecord``."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Union

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example

from .centering import MIN_CENTERING_TOKENS, Centering, NotEnoughText, text_lines
from .mix_settings import MixSettings, mix_layers


def first_docs(docs: Iterable[Doc], max_tokens: int) -> List[Doc]:
    """The first docs of ``docs`` up to ``max_tokens`` tokens (whitespace aside); NotEnoughText
    where they hold fewer than ``MIN_CENTERING_TOKENS``."""
    chosen, tokens = [], 0
    for doc in docs:
        if tokens >= max_tokens:
            break
        chosen.append(doc)
        tokens += sum(not token.is_space for token in doc)
    if tokens < MIN_CENTERING_TOKENS:
        raise NotEnoughText(
            f"elmo: the common direction of the vectors is estimated from text, and {tokens} tokens are fewer "
            f"than the {MIN_CENTERING_TOKENS} needed: give real text, as nlp.get_pipe('elmo').fit_centering("
            "nlp.pipe(texts)) or centering_text = PATH under [initialize.components.elmo]."
        )
    return chosen


def estimate(docs: Sequence[Doc], layers: Sequence[np.ndarray], mix: MixSettings, remove_directions: int) -> Centering:
    """The centring of the mixed vectors of ``docs``, whose layers (L+1, n, 2P) are ``layers``."""
    vectors = [
        mix_layers(layers_of_doc, mix)[[not token.is_space for token in doc]]
        for doc, layers_of_doc in zip(docs, layers, strict=True)
    ]
    return Centering.estimate(np.concatenate(vectors), remove_directions)


def initialization_docs(
    get_examples: Optional[Callable[[], Iterable[Example]]],
    nlp: Optional[Language],
    component_name: str,
    text: Optional[Union[str, Path]],
) -> Iterable[Doc]:
    """The docs ``initialize`` estimates from: ``text`` (a .txt file or folder) read through the
    components before ``component_name``, else the examples' reference docs."""
    if text is None:
        return (example.reference for example in (get_examples() if get_examples else []))
    if nlp is None:
        raise ValueError("elmo: centering_text needs the pipeline: call nlp.initialize(), not the component's.")
    return docs_from_texts(nlp, component_name, text_lines(text))


def docs_from_texts(nlp: Language, component_name: str, texts: Iterable[str]) -> Iterator[Doc]:
    """Texts through the components of ``nlp`` before ``component_name`` (its sentencizer): the
    docs the component reads its centring from."""
    names = nlp.pipe_names
    earlier = names[: names.index(component_name)] if component_name in names else []
    with nlp.select_pipes(enable=earlier):
        yield from nlp.pipe(texts)
