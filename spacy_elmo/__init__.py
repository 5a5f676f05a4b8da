"""spacy-elmo: ELMo deep contextualized word representations for spaCy."""

from .attributes import install_vector_hooks, register_extensions
from .batch_invariant import Blocking
from .bilm import BiLM, BiLMOutput
from .component import Elmo
from .config import PRESETS, BiLMConfig, ConfigError, config_from_options
from .download import DownloadError
from .efml import import_efml
from .embed import embed_sentences, reset_state
from .model_cache import download_model, resolve_weights
from .models import CATALOGUE, PublishedModel
from .task_mix import ElmoEmbed, ElmoTok2Vec, TaskMix
from .weights import WeightsError, import_original, load_bilm, save_bilm

__version__ = "0.1.0"

# On import, not only when a component is built: docs rebuilt from bytes in another process
# (DocBin, Doc.from_bytes, nlp.pipe(n_process=...)) read their ELMo data through these.
register_extensions()

__all__ = [
    "BiLM",
    "BiLMOutput",
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
