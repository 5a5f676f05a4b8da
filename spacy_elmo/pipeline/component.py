"""The ``elmo`` pipe: contextual vectors for every token, sentence and doc.

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": "path/to/bilm"})
    nlp.initialize()

The biLM sees one sentence at a time (with ``<S>``/``</S>``) when sentence boundaries are set,
otherwise windows of at most ``max_sentence_length`` tokens; whitespace tokens are left out of its
input and get zero vectors. ``nlp.pipe`` sorts the sentences of a batch of docs by length and runs
them in batches of at most ``max_batch_tokens`` tokens, so memory stays bounded whatever the doc
length. What a doc keeps is described in ``storage`` (the ``store`` and ``store_dtype``
settings), what users read off it in ``attributes``. With ``center_vectors`` on (opt-in), the vector hooks
(``token.vector``, ``.similarity``) compare the mixed vectors with their mean (and the top
``remove_directions`` principal directions) removed, estimated from text at ``initialize`` or by
``fit_centering`` and saved with the component (``centering``).
"""

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example
from spacy.vocab import Vocab
from thinc.api import Config, Model, Optimizer

from ..hub.cache import recorded_input_attr, resolve_weights
from ..weights.native import load_bilm
from .bilm_layer import get_bilm, on_bilm_device, set_bilm
from .centering import (
    CENTERING_TOKENS,
    Centering,
)
from .centering_fit import FitsCentering
from .extensions import install_vector_hooks
from .listeners import MixListeners
from .mix_settings import MixSettings
from .sentence_cache import SentenceCache
from .sentence_runs import doc_layers
from .settings import DEFAULTS, checked_settings, megabytes
from .storage import Storage
from .token_input import LEMMA, ORTH, check_docs_have, check_input_attr, require_lemmatizer, token_string

if TYPE_CHECKING:
    from ..network.bilm import BiLM

DEFAULT_MODEL = Config().from_str(
    """
    [model]
    @architectures = "spacy-elmo.BiLM.v1"
    preset = "small"
    """
)["model"]


@Language.factory(
    "elmo",
    default_config={"model": DEFAULT_MODEL, **DEFAULTS},
    assigns=["doc._.elmo_data", "doc._.elmo_vectors", "doc._.elmo_mix", "doc._.elmo_centering", "doc.tensor"],
)
def make_elmo(
    nlp: Language,
    name: str,
    model: Model,
    weights: Optional[str],
    layer_weights: Optional[List[float]],
    gamma: float,
    layer_norm: bool,
    pooling: str,
    set_vector_hooks: bool,
    max_sentence_length: int,
    max_batch_tokens: int,
    sentence_cache_tokens: int,
    sentence_cache_mb: float,
    token_cache_mb: float,
    precision: str,
    store: str,
    store_dtype: str,
    center_vectors: bool,
    remove_directions: int,
    input_attr: Optional[str],
) -> "Elmo":
    """The ``elmo`` factory: its arguments are the settings of ``settings.DEFAULTS`` (spaCy reads them
    from this signature to check a config)."""
    settings = dict(locals())
    for key in ("nlp", "name", "model"):
        settings.pop(key)
    return Elmo(nlp.vocab, model, name, **settings)


class Elmo(MixListeners, FitsCentering, TrainablePipe):
    """Runs a pretrained biLM over docs; see the module docstring. The biLM is frozen: spaCy does
    not train it (list the component in ``frozen_components``). The task mixes of later components
    are its listeners: their sizes come from its biLM (``listeners``)."""

    def __init__(self, vocab: Vocab, model: Model, name: str = "elmo", **settings: Any) -> None:
        """``settings``: those of ``settings.DEFAULTS`` (the factory's config), checked here."""
        self.vocab = vocab
        self.model = model
        self.name = name
        self.cfg: Dict[str, Any] = {**checked_settings(settings), "centering": None}
        self._settings = {key: value for key, value in self.cfg.items() if key not in ("weights", "centering")}
        self._warned_update = False
        self._centering: Optional[Tuple[dict, Optional[Centering]]] = None
        self._sentences = SentenceCache(self.cfg["sentence_cache_tokens"], megabytes(self.cfg["sentence_cache_mb"]))
        self.listener_map: Dict[str, List[Model]] = {}

    @property
    def bilm(self) -> "BiLM":
        """The torch BiLM this component runs."""
        return get_bilm(self.model)

    @property
    def input_attr(self) -> str:
        """What the biLM reads of each token (``token_input``): the ``input_attr`` setting, else what
        the weights were trained on (recorded by the catalogue), else ORTH (the text)."""
        return self.cfg["input_attr"] or self.cfg.get("weights_input_attr") or ORTH

    def layer_dims(self) -> Optional[Tuple[int, int]]:
        """(L+1, 2P) of the layers this component gives; None before its weights are loaded (until
        then the biLM has the architecture's sizes, which the weights replace)."""
        if not self.model.attrs.get("has_weights"):
            return None
        return self.bilm.config.n_output_layers, self.bilm.config.output_dim

    @property
    def mix(self) -> MixSettings:
        """The default mix of layers: layer_weights, gamma, layer_norm, pooling."""
        cfg = self.cfg
        n_layers = self.bilm.config.n_output_layers
        return MixSettings.for_layers(n_layers, cfg["layer_weights"], cfg["gamma"], cfg["pooling"], cfg["layer_norm"])

    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Example]]] = None,
        *,
        nlp: Optional[Language] = None,
        weights: Optional[Union[str, Path]] = None,
        centering_text: Optional[Union[str, Path]] = None,
        centering_tokens: int = CENTERING_TOKENS,
    ) -> None:
        """Load the biLM from ``weights``, given here or in the component's config: a native biLM
        directory (``convert`` or pretraining output), a published model's name (``"original"``;
        ``python -m spacy_elmo models`` lists them) or a URL of a model archive. Names and URLs
        are downloaded and converted once into the cache. Its sizes replace the architecture's, and
        fill in those of the task mixes of the components after this one in ``nlp``.

        Then the common direction of the vectors is estimated from the first ``centering_tokens``
        tokens of ``centering_text`` (a .txt file or a folder of them, one paragraph per line, read
        through the pipeline's components before this one), else of the examples' texts, and
        kept; the vector hooks use it with ``center_vectors`` on. With too little text
        (``nlp.initialize()`` alone gives none) nothing is estimated, and with ``center_vectors``
        on it warns: the vectors stay raw until ``fit_centering``."""
        path = weights or self.cfg["weights"]
        if not path:
            raise ValueError(
                "The elmo component needs biLM weights to initialize: nlp.add_pipe('elmo', "
                "config={'weights': PATH}), or weights = PATH under [initialize.components.elmo], "
                "PATH being a directory written by `python -m spacy_elmo convert` or by pretraining, "
                "or a published model's name such as 'original' (python -m spacy_elmo models)."
            )
        directory = resolve_weights(path)
        set_bilm(self.model, load_bilm(directory))
        self.model.attrs["has_weights"] = True
        self._take_input_attr(check_input_attr(recorded_input_attr(directory)), nlp)
        self.bilm.precision = self.cfg["precision"]  # decided here: a fast kernel, fp32 (warned) or refused
        self.bilm.token_cache.max_bytes = megabytes(self.cfg["token_cache_mb"])
        self.cfg["weights"] = str(path)
        self.cfg["centering"] = None
        _ = self.mix  # check layer_weights against the loaded biLM
        if nlp is not None:
            self.find_later_listeners(nlp)
        self._initialize_centering(get_examples, nlp, centering_text, centering_tokens)

    def predict(self, docs: Iterable[Doc]) -> List[np.ndarray]:
        """All layers of every token: one float32 array (L+1, len(doc), 2P) per doc."""
        docs = list(docs)
        self._require_weights()
        check_docs_have(docs, self.input_attr, self.name)
        self.bilm.precision = self.cfg["precision"]  # the choice made at initialize (cached), or a new setting's
        config = self.bilm.config
        with on_bilm_device(self.model):
            return doc_layers(
                self.model,
                docs,
                self._sentences.for_model(self.bilm),
                shape=(config.n_output_layers, config.output_dim),
                max_sentence_length=self.cfg["max_sentence_length"],
                max_batch_tokens=self.cfg["max_batch_tokens"],
                token_string=token_string(self.input_attr),
            )

    def set_annotations(self, docs: Iterable[Doc], layers: Sequence[np.ndarray]) -> None:
        """Keep each doc's layers (L+1, n, 2P) as the store settings say (see ``storage``)."""
        mix, hooks, centering = self.mix, self.cfg["set_vector_hooks"], self.centering
        storage = Storage(self.cfg["store"], self.cfg["store_dtype"])
        for doc, layers_of_doc in zip(docs, layers):
            storage.keep(doc, layers_of_doc, mix, with_tensor=hooks)
            doc._.elmo_centering = centering.as_doc_value() if centering is not None else None
            if hooks:
                install_vector_hooks(doc)

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """The biLM is frozen inside spaCy: nothing to update."""
        if not self._warned_update:
            warnings.warn(
                f"'{self.name}' (elmo) is not trained by spaCy; list it in [training] frozen_components "
                "(and annotating_components if later components read its output).",
                stacklevel=2,
            )
            self._warned_update = True
        return losses if losses is not None else {}

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "Elmo":
        model_file = Path(path) / "model"
        if "model" not in exclude and not model_file.is_file():
            raise ValueError(
                f"{path} is missing its model file (the biLM weights, {model_file}): the pipeline "
                "directory is incomplete; copy or save it again (nlp.to_disk)."
            )
        try:
            super().from_disk(path, exclude=exclude)
        except (ValueError, TypeError, KeyError) as err:
            raise ValueError(f"{model_file} is not a readable elmo model: {err}") from None
        return self._settings_from_config()

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        super().from_bytes(bytes_data, exclude=exclude)
        return self._settings_from_config()

    def _settings_from_config(self) -> "Elmo":
        """After loading: the settings this component was made with (the pipeline's config, with
        any overrides given to spacy.load) win over those saved in its cfg, which keeps only what
        initialize found (the weights' path, the centering)."""
        self.cfg.update(self._settings)
        if self.model.attrs.get("has_weights"):
            self.bilm.precision = self.cfg["precision"]  # decided on load, as at initialize
            self.bilm.token_cache.max_bytes = megabytes(self.cfg["token_cache_mb"])
        return self

    def _take_input_attr(self, trained_on: Optional[str], nlp: Optional[Language]) -> None:
        """Keep what the weights read (saved in cfg); warn where the setting overrides it, and
        require a lemmatizer in ``nlp`` where the biLM reads lemmas."""
        self.cfg["weights_input_attr"] = trained_on
        chosen = self.cfg["input_attr"]
        if trained_on is not None and chosen is not None and chosen != trained_on:
            warnings.warn(
                f"'{self.name}' (elmo): its weights were trained on {trained_on} but input_attr is {chosen}: the "
                f"biLM reads input unlike its training text. Leave input_attr unset to read {trained_on}.",
                stacklevel=3,
            )
        if self.input_attr == LEMMA and nlp is not None:
            require_lemmatizer(nlp, self.name)

    def _require_weights(self) -> None:
        if not self.model.attrs.get("has_weights"):
            raise ValueError(
                f"The '{self.name}' component has no biLM weights yet: call nlp.initialize() with "
                "weights configured (nlp.add_pipe('elmo', config={'weights': PATH})), or load a saved "
                "pipeline with spacy.load."
            )
