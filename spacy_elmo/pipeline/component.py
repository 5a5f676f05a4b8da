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

import threading
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example
from spacy.vocab import Vocab
from thinc.api import Config, Model, NumpyOps

from ..hub.cache import resolve_weights
from ..kernels.precision import check_precision
from ..network.sentences import batches_by_length
from ..weights.native import load_bilm
from .bilm_layer import get_bilm, set_bilm
from .centering import (
    CENTERING_TOKENS,
    MIN_CENTERING_TOKENS,
    Centering,
    NotEnoughText,
    check_centering_settings,
    text_lines,
)
from .extensions import install_vector_hooks
from .listeners import MixListeners
from .mix_settings import MixSettings, check_mix_settings, mix_layers
from .storage import Storage

DEFAULT_MODEL = Config().from_str(
    """
    [model]
    @architectures = "spacy-elmo.BiLM.v1"
    preset = "small"
    """
)["model"]

# A segment of a doc the biLM reads as one sentence: (doc position, token indices).
Segment = Tuple[int, np.ndarray]


@Language.factory(
    "elmo",
    default_config={
        "model": DEFAULT_MODEL,
        "weights": None,
        "layer_weights": None,
        "gamma": 1.0,
        "layer_norm": True,
        "pooling": "mean",
        "set_vector_hooks": True,
        "max_sentence_length": 256,
        "max_batch_tokens": 4096,
        "sentence_cache_tokens": 0,
        "precision": "fp32",
        "store": "layers",
        "store_dtype": "float32",
        "center_vectors": False,
        "remove_directions": 0,
    },
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
    precision: str,
    store: str,
    store_dtype: str,
    center_vectors: bool,
    remove_directions: int,
) -> "Elmo":
    return Elmo(
        nlp.vocab,
        model,
        name,
        weights=weights,
        layer_weights=layer_weights,
        gamma=gamma,
        layer_norm=layer_norm,
        pooling=pooling,
        set_vector_hooks=set_vector_hooks,
        max_sentence_length=max_sentence_length,
        max_batch_tokens=max_batch_tokens,
        sentence_cache_tokens=sentence_cache_tokens,
        precision=precision,
        store=store,
        store_dtype=store_dtype,
        center_vectors=center_vectors,
        remove_directions=remove_directions,
    )


class Elmo(MixListeners, TrainablePipe):
    """Runs a pretrained biLM over docs; see the module docstring. The biLM is frozen: spaCy does
    not train it (list the component in ``frozen_components``). The task mixes of later components
    are its listeners: their sizes come from its biLM (``listeners``)."""

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "elmo",
        *,
        weights: Optional[str] = None,
        layer_weights: Optional[List[float]] = None,
        gamma: float = 1.0,
        layer_norm: bool = True,
        pooling: str = "mean",
        set_vector_hooks: bool = True,
        max_sentence_length: int = 256,
        max_batch_tokens: int = 4096,
        sentence_cache_tokens: int = 0,
        precision: str = "fp32",
        store: str = "layers",
        store_dtype: str = "float32",
        center_vectors: bool = False,
        remove_directions: int = 0,
    ) -> None:
        for setting, value in (("max_sentence_length", max_sentence_length), ("max_batch_tokens", max_batch_tokens)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"elmo: {setting} must be a positive integer, got {value!r}.")
        if not isinstance(sentence_cache_tokens, int) or sentence_cache_tokens < 0:
            raise ValueError(f"elmo: sentence_cache_tokens must be an integer >= 0, got {sentence_cache_tokens!r}.")
        check_mix_settings(layer_weights, gamma, pooling)
        check_precision(precision)
        Storage(store, store_dtype)
        check_centering_settings(center_vectors, remove_directions)
        self.vocab = vocab
        self.model = model
        self.name = name
        self.cfg: Dict[str, Any] = {
            "weights": str(weights) if weights else None,
            "layer_weights": layer_weights,
            "gamma": gamma,
            "layer_norm": layer_norm,
            "pooling": pooling,
            "set_vector_hooks": set_vector_hooks,
            "max_sentence_length": max_sentence_length,
            "max_batch_tokens": max_batch_tokens,
            "sentence_cache_tokens": sentence_cache_tokens,
            "precision": precision,
            "store": store,
            "store_dtype": store_dtype,
            "center_vectors": center_vectors,
            "remove_directions": remove_directions,
            "centering": None,
        }
        self._settings = {key: value for key, value in self.cfg.items() if key not in ("weights", "centering")}
        self._warned_update = False
        self._centering: Optional[Tuple[dict, Centering]] = None
        self._sentences = SentenceCache(sentence_cache_tokens)
        self.listener_map: Dict[str, List[Model]] = {}

    @property
    def bilm(self):
        """The torch BiLM this component runs."""
        return get_bilm(self.model)

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
        set_bilm(self.model, load_bilm(resolve_weights(path)))
        self.model.attrs["has_weights"] = True
        self.bilm.precision = self.cfg["precision"]  # decided here: a fast kernel, fp32 (warned) or refused
        self.cfg["weights"] = str(path)
        self.cfg["centering"] = None
        _ = self.mix  # check layer_weights against the loaded biLM
        if nlp is not None:
            self.find_later_listeners(nlp)
        self._initialize_centering(get_examples, nlp, centering_text, centering_tokens)

    def _initialize_centering(self, get_examples, nlp, text: Optional[Union[str, Path]], max_tokens: int) -> None:
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

    def predict(self, docs: Iterable[Doc]) -> List[np.ndarray]:
        """All layers of every token: one float32 array (L+1, len(doc), 2P) per doc."""
        docs = list(docs)
        self._require_weights()
        self.bilm.precision = self.cfg["precision"]  # the choice made at initialize (cached), or a new setting's
        bilm_config = self.bilm.config
        outputs = [
            np.zeros((bilm_config.n_output_layers, len(doc), bilm_config.output_dim), dtype=np.float32) for doc in docs
        ]
        segments = [segment for position, doc in enumerate(docs) for segment in self._segments(position, doc)]
        words = [tuple(docs[position][int(i)].text for i in indices) for position, indices in segments]
        cache = self._sentences.for_model(self.bilm)
        missing = []
        for index, sentence in enumerate(words):
            cached = cache.get(sentence)
            if cached is None:
                missing.append(index)
            else:
                self._place(outputs, segments[index], cached)
        for batch in batches_by_length([words[i] for i in missing], self.cfg["max_batch_tokens"]):
            layers = self._to_host(self.model.predict([list(words[missing[i]]) for i in batch]))
            for i, sentence_layers in zip(batch, layers):
                cache.put(words[missing[i]], sentence_layers)
                self._place(outputs, segments[missing[i]], sentence_layers)
        return outputs

    @staticmethod
    def _place(outputs: List[np.ndarray], segment: Segment, layers: np.ndarray) -> None:
        position, indices = segment
        outputs[position][:, indices] = layers

    def _to_host(self, layers: List[Any]) -> List[np.ndarray]:
        """Per-sentence arrays as numpy, with one device-to-host copy for the whole batch."""
        if isinstance(self.model.ops, NumpyOps) or not layers:
            return layers
        host = self.model.ops.to_numpy(self.model.ops.xp.concatenate(layers, axis=1))
        return np.split(host, np.cumsum([part.shape[1] for part in layers])[:-1], axis=1)

    def set_annotations(self, docs: Iterable[Doc], layers: Sequence[np.ndarray]) -> None:
        """Keep each doc's layers (L+1, n, 2P) as the store settings say (see ``storage``)."""
        mix, hooks, centering = self.mix, self.cfg["set_vector_hooks"], self.centering
        storage = Storage(self.cfg["store"], self.cfg["store_dtype"])
        for doc, doc_layers in zip(docs, layers):
            storage.keep(doc, doc_layers, mix, with_tensor=hooks)
            doc._.elmo_centering = centering.as_doc_value() if centering is not None else None
            if hooks:
                install_vector_hooks(doc)

    def update(self, examples: Iterable[Example], *, drop: float = 0.0, sgd=None, losses=None) -> Dict[str, float]:
        """The biLM is frozen inside spaCy: nothing to update."""
        if not self._warned_update:
            warnings.warn(
                f"'{self.name}' (elmo) is not trained by spaCy; list it in [training] frozen_components "
                "(and annotating_components if later components read its output).",
                stacklevel=2,
            )
            self._warned_update = True
        return losses if losses is not None else {}

    def from_disk(self, path, *, exclude=tuple()) -> "Elmo":
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

    def from_bytes(self, bytes_data: bytes, *, exclude=tuple()) -> "Elmo":
        super().from_bytes(bytes_data, exclude=exclude)
        return self._settings_from_config()

    def _settings_from_config(self) -> "Elmo":
        """After loading: the settings this component was made with (the pipeline's config, with
        any overrides given to spacy.load) win over those saved in its cfg, which keeps only what
        initialize found (the weights' path, the centering)."""
        self.cfg.update(self._settings)
        if self.model.attrs.get("has_weights"):
            self.bilm.precision = self.cfg["precision"]  # decided on load, as at initialize
        return self

    def _require_weights(self) -> None:
        if not self.model.attrs.get("has_weights"):
            raise ValueError(
                f"The '{self.name}' component has no biLM weights yet: call nlp.initialize() with "
                "weights configured (nlp.add_pipe('elmo', config={'weights': PATH})), or load a saved "
                "pipeline with spacy.load."
            )

    def _segments(self, position: int, doc: Doc) -> List[Segment]:
        """The doc's sentences (or windows, without sentence boundaries), whitespace tokens left
        out, cut into pieces of at most max_sentence_length tokens."""
        longest = self.cfg["max_sentence_length"]
        spans = doc.sents if doc.has_annotation("SENT_START") else [doc[:]]
        segments = []
        for span in spans:
            indices = np.array([token.i for token in span if not token.is_space], dtype=np.int64)
            for start in range(0, len(indices), longest):
                segments.append((position, indices[start : start + longest]))
        return segments


class SentenceCache:
    """The layers of recently seen sentences, up to ``capacity`` tokens (0: off), least recently
    used first out. Exact, since a sentence's layers do not depend on its batch; emptied when the
    component gets another biLM or runs it in another precision. Saves the frozen biLM from
    recomputing a training corpus every epoch."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()  # several threads may share the component
        self._entries: "OrderedDict[tuple, np.ndarray]" = OrderedDict()
        self._tokens = 0
        self._owner: Optional[Tuple[int, str]] = None

    def for_model(self, bilm) -> "SentenceCache":
        """This cache, emptied first unless its layers came from ``bilm`` in its current precision."""
        owner = (id(bilm), bilm.precision)
        with self._lock:
            if owner != self._owner:
                self._entries.clear()
                self._tokens, self._owner = 0, owner
        return self

    def get(self, sentence: tuple) -> Optional[np.ndarray]:
        with self._lock:
            layers = self._entries.get(sentence)
            if layers is not None:
                self._entries.move_to_end(sentence)
            return layers

    def put(self, sentence: tuple, layers: np.ndarray) -> None:
        if not self.capacity or len(sentence) > self.capacity:
            return
        copy = np.array(layers, copy=True)
        with self._lock:
            if sentence in self._entries:
                return
            self._entries[sentence] = copy
            self._tokens += len(sentence)
            while self._tokens > self.capacity:
                old, _ = self._entries.popitem(last=False)
                self._tokens -= len(old)
