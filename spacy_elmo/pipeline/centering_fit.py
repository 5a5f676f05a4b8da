"""The elmo component's centring: the common direction(s) of its vectors estimated from text (at
``initialize`` or by ``fit_centering``), kept in its cfg and saved with it; the vector hooks remove
them with ``center_vectors`` on (see ``centering`` for the arithmetic)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example

from .centering import CENTERING_TOKENS, MIN_CENTERING_TOKENS, Centering, NotEnoughText, text_lines
from .mix_settings import MixSettings, mix_layers


class FitsCentering:
    """Mixin for the elmo component; it provides ``name``, ``cfg``, ``mix``, ``predict`` and
    ``_require_weights``, and sets ``_centering = None`` in its ``__init__``."""

    name: str
    cfg: Dict[str, Any]
    _centering: Optional[Tuple[dict, Optional[Centering]]]  # (cfg entry, its Centering)
    predict: Callable[[Iterable[Doc]], List[np.ndarray]]
    _require_weights: Callable[[], None]

    if TYPE_CHECKING:  # the component's read-only property

        @property
        def mix(self) -> MixSettings: ...

    @property
    def centering(self) -> Optional[Centering]:
        """What the vector hooks remove from the mixed vectors (see ``centering``): the estimate,
        with ``center_vectors`` on; None when it is off or nothing was estimated."""
        return self.centering_estimate if self.cfg["center_vectors"] else None

    @property
    def centering_estimate(self) -> Optional[Centering]:
        """The mean (and principal directions) estimated from text, used or not."""
        entry = self.cfg.get("centering")
        if entry is None:
            return None
        if self._centering is None or self._centering[0] is not entry:
            self._centering = (entry, Centering.from_value(entry))
        return self._centering[1]

    def _initialize_centering(
        self,
        get_examples: Optional[Callable[[], Iterable[Example]]],
        nlp: Optional[Language],
        text: Optional[Union[str, Path]],
        max_tokens: int,
    ) -> None:
        if text is not None:
            if nlp is None:
                raise ValueError("elmo: centering_text needs the pipeline: call nlp.initialize(), not the component's.")
            docs = self.docs_from_texts(nlp, text_lines(text))
        else:
            docs = (eg.reference for eg in (get_examples() if get_examples else []))
        try:
            self.fit_centering(docs, max_tokens)
        except NotEnoughText as err:
            if not self.cfg["center_vectors"]:
                return
            warnings.warn(
                f"{err} With center_vectors on, the vector hooks (token.vector, .similarity) give raw ELMo "
                "vectors until then.",
                stacklevel=3,
            )

    def fit_centering(self, docs: Iterable[Doc], max_tokens: int = CENTERING_TOKENS) -> Centering:
        """Estimate what the vector hooks remove (the mean, and ``remove_directions`` principal
        directions) from the mixed vectors of the first ``max_tokens`` tokens of ``docs`` (their
        sentence boundaries, if set, are used; their annotations are left alone), and keep it
        with the component (it is saved with the pipeline)."""
        self._require_weights()
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
        mix = self.mix
        vectors = [
            mix_layers(layers, mix)[[not token.is_space for token in doc]]
            for doc, layers in zip(chosen, self.predict(chosen))
        ]
        centering = Centering.estimate(np.concatenate(vectors), self.cfg["remove_directions"])
        self.cfg["centering"] = centering.as_config()
        return centering

    def docs_from_texts(self, nlp: Language, texts: Iterable[str]) -> Iterator[Doc]:
        """Texts through the components of ``nlp`` that come before this one (its sentencizer):
        the docs ``fit_centering`` reads."""
        earlier = nlp.pipe_names[: nlp.pipe_names.index(self.name)] if self.name in nlp.pipe_names else []
        with nlp.select_pipes(enable=earlier):
            yield from nlp.pipe(texts)
