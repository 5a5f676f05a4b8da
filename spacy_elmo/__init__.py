"""spacy-elmo: ELMo deep contextualized word representations for spaCy."""

from .hub.cache import download_model, resolve_weights
from .hub.catalogue import CATALOGUE, PublishedModel
from .hub.download import DownloadError
from .kernels.batch_invariant import Blocking
from .network.bilm import BiLM, BiLMOutput
from .network.config import PRESETS, BiLMConfig, ConfigError
from .network.runner import BiLMRunner, embed_sentences, reset_state
from .pipeline.component import Elmo
from .pipeline.extensions import install_vector_hooks, register_extensions
from .pipeline.task_mix import ElmoEmbed, ElmoTok2Vec, TaskMix
from .weights.elmo_for_many_langs import import_efml
from .weights.native import WeightsError, load_bilm, save_bilm
from .weights.original import config_from_options, import_original

__version__ = "0.1.0"

# On import, not only when a component is built: docs rebuilt from bytes in another process
# (DocBin, Doc.from_bytes, nlp.pipe(n_process=...)) read their ELMo data through these.
register_extensions()

__all__ = [
    "BiLM",
    "BiLMOutput",
    "BiLMRunner",
    "Blocking",
    "Elmo",
    "ElmoEmbed",
    "ElmoTok2Vec",
    "TaskMix",
    "install_vector_hooks",
    "BiLMConfig",
    "ConfigError",
    "PRESETS",
    "WeightsError",
    "config_from_options",
    "embed_sentences",
    "import_original",
    "load_bilm",
    "reset_state",
    "save_bilm",
    "__version__",
    "CATALOGUE",
    "DownloadError",
    "import_efml",
    "PublishedModel",
    "download_model",
    "resolve_weights",
]
