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

import dataclasses
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
from ..hub.catalogue import CATALOGUE
from ..weights.native import load_bilm
from . import centering_fit
from .bilm_layer import encoder_of, get_bilm, on_bilm_device, set_bilm
from .centering import CENTERING_TOKENS, Centering, NotEnoughText
from .extensions import install_vector_hooks
from .mix_settings import MixSettings
from .sentence_cache import SentenceCache
from .sentence_runs import doc_layers
from .settings import ElmoSettings, settings_as_parameters
from .task_mix import set_layer_dims, task_mixes
from .token_input import LEMMA, ORTH, check_docs_have, check_input_attr, require_lemmatizer, token_string
from .weights_record import WeightsRecord

if TYPE_CHECKING:
    from ..network.bilm import BiLM
    from ..network.runner import BiLMRunner

DEFAULT_MODEL = Config().from_str(
    """
    [model]
    @architectures = "spacy-elmo.BiLM.v1"
    preset = "small"
    """
)["model"]


@Language.factory(
    "elmo",
    default_config={"model": DEFAULT_MODEL, **ElmoSettings().to_config()},
    assigns=["doc._.elmo_data", "doc._.elmo_vectors", "doc._.elmo_mix", "doc._.elmo_centering", "doc.tensor"],
)
@settings_as_parameters
def make_elmo(nlp: Language, name: str, model: Model, **settings: Any) -> "Elmo":
    """The ``elmo`` factory: ``model`` and the settings (``ElmoSettings``, whose fields spaCy sees as
    this function's keyword parameters, to check a config and fill in what it leaves out)."""
    return Elmo(nlp.vocab, model, name, ElmoSettings(**settings))


class Elmo(TrainablePipe):
    """Runs a pretrained biLM over docs; see the module docstring. The biLM is frozen: spaCy does
    not train it (list the component in ``frozen_components``).

    ``settings`` are what it was told (its config, fixed when it is built); ``cfg`` is what it
    learned about its weights (``WeightsRecord``), saved with it. What runs (the kernels for the
    precision, the token cache's bound, the default mix of layers, the centring) is decided when
    weights arrive (``initialize``, loading, unpickling in a worker process) and read by every call.
    """

    def __init__(self, vocab: Vocab, model: Model, name: str = "elmo", settings: Optional[ElmoSettings] = None) -> None:
        self.vocab = vocab
        self.model = model
        self.name = name
        self.settings = settings or ElmoSettings()
        self.cfg: Dict[str, Any] = {}
        self.listener_map: Dict[str, List[Model]] = {}
        self._sentences = SentenceCache(self.settings.sentence_cache_tokens, self.settings.sentence_cache_bytes)
        self._mix: Optional[MixSettings] = None
        self._warned_update = False
        self._keep(WeightsRecord())

    # What runs: decided when weights arrive

    @property
    def bilm(self) -> "BiLM":
        """The torch BiLM this component runs."""
        return get_bilm(self.model)

    @property
    def runner(self) -> "BiLMRunner":
        """What runs the biLM (its backend for the precision, its token cache), made when the weights
        arrived (``_take_weights``) and again where thinc moved them."""
        self._require_weights()
        runner = encoder_of(self.model).runner
        assert runner is not None  # made with the weights, by _take_weights
        return runner

    @property
    def record(self) -> WeightsRecord:
        """What the component learned about its weights (saved as its ``cfg``)."""
        return self._record

    @property
    def input_attr(self) -> str:
        """What the biLM reads of each token (``token_input``): the ``input_attr`` setting, else what
        the weights were trained on (recorded by the catalogue), else ORTH (the text)."""
        return self.settings.input_attr or self._record.weights_input_attr or ORTH

    @property
    def mix(self) -> MixSettings:
        """The default mix of layers (layer_weights, gamma, layer_norm, pooling) for these weights."""
        self._require_weights()
        assert self._mix is not None  # made with the weights, by _take_weights
        return self._mix

    @property
    def centering(self) -> Optional[Centering]:
        """What the vector hooks remove from the mixed vectors (see ``centering``): the estimate,
        with ``center_vectors`` on; None when it is off or nothing was estimated."""
        return self._centering if self.settings.center_vectors else None

    @property
    def centering_estimate(self) -> Optional[Centering]:
        """The mean (and principal directions) estimated from text, used or not."""
        return self._centering

    def layer_dims(self) -> Optional[Tuple[int, int]]:
        """(L+1, 2P) of the layers this component gives; None before its weights are loaded (until
        then the biLM has the architecture's sizes, which the weights replace)."""
        if not self.model.attrs.get("has_weights"):
            return None
        return self.bilm.config.n_output_layers, self.bilm.config.output_dim

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
        path = weights or self.settings.weights
        if not path:
            raise ValueError(
                "The elmo component needs biLM weights to initialize: nlp.add_pipe('elmo', "
                "config={'weights': PATH}), or weights = PATH under [initialize.components.elmo], "
                "PATH being a directory written by `python -m spacy_elmo convert` or by pretraining, "
                "or a published model's name such as 'original' (python -m spacy_elmo models)."
            )
        self._check_before_download(str(path), nlp)
        directory = resolve_weights(path)
        set_bilm(self.model, load_bilm(directory))
        self.model.attrs["has_weights"] = True
        trained_on = check_input_attr(recorded_input_attr(directory))
        self._keep(WeightsRecord(weights=str(path), weights_input_attr=trained_on))
        self._check_input_attr(trained_on, nlp)
        self._take_weights()
        if nlp is not None:
            self._find_later_listeners(nlp)
        docs = centering_fit.initialization_docs(get_examples, nlp, self.name, centering_text)
        self._initialize_centering(docs, centering_tokens)

    # Running

    def predict(self, docs: Iterable[Doc]) -> List[np.ndarray]:
        """All layers of every token: one array (L+1, len(doc), 2P) per doc, in the dtype the doc
        keeps them in (float16 with store "layers", store_dtype "float16" and no vector hooks;
        float32 otherwise)."""
        storage = self.settings.storage
        return self._layers(docs, storage.layers_dtype(with_tensor=self.settings.set_vector_hooks))

    def _layers(self, docs: Iterable[Doc], dtype: type) -> List[np.ndarray]:
        docs = list(docs)
        self._require_weights()
        check_docs_have(docs, self.input_attr, self.name)
        config = self.bilm.config
        with on_bilm_device(self.model):
            return doc_layers(
                self.model,
                docs,
                self._sentences.for_model(self.runner, dtype),
                shape=(config.n_output_layers, config.output_dim),
                dtype=dtype,
                max_sentence_length=self.settings.max_sentence_length,
                max_batch_tokens=self.settings.max_batch_tokens,
                token_string=token_string(self.input_attr),
            )

    def set_annotations(self, docs: Iterable[Doc], layers: Sequence[np.ndarray]) -> None:
        """Keep each doc's layers (L+1, n, 2P) as the store settings say (see ``storage``)."""
        mix, hooks, centering = self.mix, self.settings.set_vector_hooks, self.centering
        for doc, layers_of_doc in zip(docs, layers, strict=True):
            self.settings.storage.keep(doc, layers_of_doc, mix, with_tensor=hooks)
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

    # Centring

    def fit_centering(self, docs: Iterable[Doc], max_tokens: int = CENTERING_TOKENS) -> Centering:
        """Estimate what the vector hooks remove (the mean, and ``remove_directions`` principal
        directions) from the mixed vectors of the first ``max_tokens`` tokens of ``docs`` (their
        sentence boundaries, if set, are used; their annotations are left alone), and keep it
        with the component (it is saved with the pipeline)."""
        self._require_weights()
        chosen = centering_fit.first_docs(docs, max_tokens)
        layers = self._layers(chosen, np.float32)
        estimate = centering_fit.estimate(chosen, layers, self.mix, self.settings.remove_directions)
        self._keep(dataclasses.replace(self._record, centering=estimate.as_config()))
        return estimate

    def _initialize_centering(self, docs: Iterable[Doc], max_tokens: int) -> None:
        try:
            self.fit_centering(docs, max_tokens)
        except NotEnoughText as err:
            if self.settings.center_vectors:
                warnings.warn(
                    f"{err} With center_vectors on, the vector hooks (token.vector, .similarity) give raw ELMo "
                    "vectors until then.",
                    stacklevel=3,
                )

    # Listeners: the task mixes (spacy-elmo.TaskMix.v1) in later components' models read this
    # component's layers, so they take their sizes (L+1, 2P) from its biLM. spaCy links them through
    # these methods (the protocol tok2vec implements) on add_pipe, after loading, and in spacy train
    # before initializing; a component without weights yet fills the sizes in at initialize.

    @property
    def listening_components(self) -> List[str]:
        """The later components whose models hold a task mix."""
        return list(self.listener_map)

    @property
    def listeners(self) -> List[Model]:
        """Their task mixes."""
        return [mix for name in self.listening_components for mix in self.listener_map[name]]

    def add_listener(self, listener: Model, component_name: str) -> None:
        mixes = self.listener_map.setdefault(component_name, [])
        if listener not in mixes:
            mixes.append(listener)

    def remove_listener(self, listener: Model, component_name: str) -> bool:
        mixes = self.listener_map.get(component_name, [])
        if listener not in mixes:
            return False
        mixes.remove(listener)
        if not mixes:
            del self.listener_map[component_name]
        return True

    def find_listeners(self, component: Any) -> None:
        """List the task mixes in ``component``'s model and give them this biLM's sizes."""
        model = getattr(component, "model", None)
        if not isinstance(model, Model):
            return
        dims = self.layer_dims()
        for mix in task_mixes(model):
            self.add_listener(mix, component.name)
            if dims is not None:
                set_layer_dims(mix, *dims, source=f"the '{self.name}' component before '{component.name}'")

    def _find_later_listeners(self, nlp: Language) -> None:
        components = [component for _, component in nlp.pipeline]
        if self in components:
            for component in components[components.index(self) + 1 :]:
                self.find_listeners(component)

    # Saving and loading: spaCy saves cfg (the record) and the model; the settings come from the
    # pipeline's config.cfg, which builds the component before its files are read.

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
        return self._loaded()

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        super().from_bytes(bytes_data, exclude=exclude)
        return self._loaded()

    def _loaded(self) -> "Elmo":
        """After spaCy read the files: the record from the saved cfg (of any version), then what
        runs, as at initialize."""
        self._keep(WeightsRecord.from_cfg(self.cfg))
        if self.model.attrs.get("has_weights"):
            self._take_weights()
        return self

    def __setstate__(self, state: Any) -> None:
        """Unpickled (into a worker of nlp.pipe(n_process=N), maybe on another machine): what runs
        is decided again here."""
        super().__setstate__(state)
        if self.model.attrs.get("has_weights"):
            self._take_weights()

    # Helpers

    def _keep(self, record: WeightsRecord) -> None:
        """Keep ``record`` (typed, and as the cfg spaCy saves) and its centring, parsed once."""
        self._record = record
        self.cfg = record.to_cfg()
        self._centering = Centering.from_value(record.centering)

    def _take_weights(self) -> None:
        """Decide what runs with the weights now in the model: the kernels for the precision
        (by what this machine is, ``kernels.select``: its kernel, fp32 with a warning, or refused), the token
        cache's bound and the default mix (layer_weights checked against the layers)."""
        settings = self.settings
        encoder_of(self.model).run_with(settings.precision, settings.token_cache_bytes)
        n_layers = self.bilm.config.n_output_layers
        self._mix = MixSettings.for_layers(
            n_layers, settings.layer_weights, settings.gamma, settings.pooling, settings.layer_norm
        )

    def _check_input_attr(self, trained_on: Optional[str], nlp: Optional[Language]) -> None:
        """Warn where the setting overrides what the weights read; require a lemmatizer in ``nlp``
        where the biLM reads lemmas."""
        chosen = self.settings.input_attr
        if trained_on is not None and chosen is not None and chosen != trained_on:
            warnings.warn(
                f"'{self.name}' (elmo): its weights were trained on {trained_on} but input_attr is {chosen}: the "
                f"biLM reads input unlike its training text. Leave input_attr unset to read {trained_on}.",
                stacklevel=3,
            )
        if self.input_attr == LEMMA and nlp is not None:
            require_lemmatizer(nlp, self.name)

    def _check_before_download(self, weights: str, nlp: Optional[Language]) -> None:
        """A published model trained on lemmas needs a lemmatizer before this component: said before
        its download, from what the catalogue records."""
        published = CATALOGUE.get(weights)
        reads_lemmas = published is not None and published.input_attr == LEMMA
        if reads_lemmas and self.settings.input_attr in (None, LEMMA) and nlp is not None:
            require_lemmatizer(nlp, self.name)

    def _require_weights(self) -> None:
        if not self.model.attrs.get("has_weights"):
            raise ValueError(
                f"The '{self.name}' component has no biLM weights yet: call nlp.initialize() with "
                "weights configured (nlp.add_pipe('elmo', config={'weights': PATH})), or load a saved "
                "pipeline with spacy.load."
            )
