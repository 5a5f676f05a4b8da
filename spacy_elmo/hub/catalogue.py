"""The catalogue of published ELMo models: name -> files, URLs, checksums, language, licence.

    python -m spacy_elmo models                 # the table
    python -m spacy_elmo download original bilm/
    nlp.add_pipe("elmo", config={"weights": "original"})

Two formats: ``bilm-tf`` (the original release: options.json + weights.hdf5; AllenNLP's two files,
or the NLPL repository's zip of options.json + model.hdf5 [+ vocab.txt, meta.json]) and ``efml``
(ELMoForManyLangs: a zip with config.json, char.dic, word.dic, encoder.pkl, token_embedder.pkl).

Sizes and sha256 are pinned where a source for them can be named (``RemoteFile.pinned_by``); a
download that differs is refused with both values and that source. Where none is known, the first
download records the sha256 it got and later uses check against it. AllenNLP's file names state
each model's shape (``elmo_2x4096_512_2048cnn_2xhighway``: 2 layers of 4,096 cells projected to
512, 2,048 char filters, 2 highways): an options.json that describes another shape is refused
(``BiLMShape``), which pins what an unpinned options.json may say.

``input_attr`` is what the model was trained on: the text (``ORTH``) or, for models trained on
lemmatized text, ``LEMMA``: the elmo component then reads the lemmas a lemmatizer set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from .download import RemoteFile

if TYPE_CHECKING:
    from ..network.config import BiLMConfig

BILM_TF = "bilm-tf"
EFML = "efml"

_ALLENNLP = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
_NLPL_EFML = "http://vectors.nlpl.eu/repository/11"
_NLPL_20 = "http://vectors.nlpl.eu/repository/20"  # version 2.0 of the repository added its ELMo models

PETERS_2018 = (
    "Peters, Neumann, Iyyer, Gardner, Clark, Lee, Zettlemoyer (2018). Deep contextualized word "
    "representations. NAACL-HLT. https://aclanthology.org/N18-1202"
)
CHE_2018 = (
    "Che, Liu, Wang, Zheng, Liu (2018). Towards Better UD Parsing: Deep Contextualized Word "
    "Embeddings, Ensemble, and Treebank Concatenation. CoNLL 2018 Shared Task. "
    "https://aclanthology.org/K18-2005; models hosted by the NLPL Vectors Repository (Fares, "
    "Kutuzov, Oepen, Velldal 2017, https://aclanthology.org/W17-0237)"
)
NLPL_REPOSITORY = (
    "Fares, Kutuzov, Oepen, Velldal (2017). Word vectors, reuse, and replicability: Towards a community "
    "repository of large-text resources. NoDaLiDa 2017. https://aclanthology.org/W17-0237"
)
NORLM_2021 = (
    "Kutuzov, Barnes, Velldal, Øvrelid, Oepen (2021). Large-Scale Contextualised Language Modelling for "
    "Norwegian. NoDaLiDa 2021. https://arxiv.org/abs/2104.06546"
)
KUTUZOV_KUZMENKO_2019 = (
    "Kutuzov, Kuzmenko (2019). To Lemmatize or Not to Lemmatize: How Word Normalisation Affects ELMo "
    "Performance in Word Sense Disambiguation. First NLPL Workshop on Deep Learning for NLP. "
    "https://aclanthology.org/W19-6203"
)
KUTUZOV_GIULIANELLI_2020 = (
    "Kutuzov, Giulianelli (2020). UiO-UvA at SemEval-2020 Task 1: Contextualised Embeddings for Lexical "
    "Semantic Change Detection. SemEval 2020. https://aclanthology.org/2020.semeval-1.14"
)
_ALLENNLP_LICENCE = "Apache-2.0 (AllenNLP, which publishes it)"
_UNSTATED_LICENCE = "not stated by the publisher: check the source before redistributing"
_NORLM_LICENCE = "CC BY 4.0 (the NLPL Vector Repository's licence for the NorLM models, Kutuzov et al. 2021)"
# The one source of the two pinned AllenNLP checksums (see the catalogue entries).
_LFS_COPY = (
    "the Git LFS pointer of a third-party copy of the file (not AllenNLP itself; the size agrees with "
    "the parameter count)"
)


class UnknownModelError(ValueError):
    """A name that is not in the catalogue."""


@dataclass(frozen=True)
class BiLMShape:
    """A biLM's shape as a published name states it: layers, cells, projection, char filters and
    highway layers."""

    layers: int
    cells: int
    projection: int
    filters: int
    highways: int

    @classmethod
    def from_name(cls, name: str) -> Optional["BiLMShape"]:
        """The shape in an AllenNLP file name (``..._2x4096_512_2048cnn_2xhighway...``), or None."""
        found = re.search(r"(\d+)x(\d+)_(\d+)_(\d+)cnn_(\d+)xhighway", name)
        return cls(*(int(group) for group in found.groups())) if found else None

    @classmethod
    def of(cls, config: "BiLMConfig") -> "BiLMShape":
        """The shape of a biLM config (e.g. ``weights.original.config_from_options``'s)."""
        return cls(config.n_layers, config.lstm_dim, config.projection_dim, config.n_filters, config.n_highway)

    def __str__(self) -> str:
        return (
            f"{self.layers} x {self.cells} cells projected to {self.projection}, {self.filters:,} char filters, "
            f"{self.highways} highway layer{'s' if self.highways != 1 else ''}"
        )


@dataclass(frozen=True)
class PublishedModel:
    """One downloadable model. ``files``: options + weights (bilm-tf), or one archive (efml, and
    bilm-tf from NLPL). ``input_attr``: the spaCy token attribute it was trained on ("ORTH": the
    text; "LEMMA": lemmas). ``vocabulary_size``: the words of its softmax in training, as stated."""

    name: str
    language: str
    format: str
    files: Tuple[RemoteFile, ...]
    trained_on: str
    licence: str
    citation: str
    source: str
    parameters: Optional[str] = None
    input_attr: str = "ORTH"
    vocabulary_size: Optional[int] = None
    shape: Optional[BiLMShape] = None  # as its publisher's file names state it

    @property
    def is_archive(self) -> bool:
        """Whether the model comes as one archive to unpack (rather than options + weights)."""
        return len(self.files) == 1

    @property
    def spacy_language(self) -> str:
        """The spaCy language code for its pipelines ("xx" where spaCy has none)."""
        return _SPACY_LANGUAGE.get(self.language, self.language)


def _allennlp(
    name: str,
    folder: str,
    stem: str,
    weights: str,
    trained_on: str,
    parameters: Optional[str],
    language: str = "en",
    pinned: Tuple[Optional[int], Optional[str]] = (None, None),
) -> PublishedModel:
    size, sha256 = pinned
    return PublishedModel(
        name=name,
        language=language,
        format=BILM_TF,
        files=(
            RemoteFile(f"{_ALLENNLP}/{folder}/{stem}_options.json", "options.json"),
            RemoteFile(f"{_ALLENNLP}/{folder}/{weights}", "weights.hdf5", size, sha256, _LFS_COPY if sha256 else None),
        ),
        trained_on=trained_on,
        licence=_ALLENNLP_LICENCE if "contributed" not in folder else _UNSTATED_LICENCE,
        citation=PETERS_2018,
        source="https://allennlp.org/elmo",
        parameters=parameters,
        shape=BiLMShape.from_name(stem),
    )


_ONE_BILLION = "1B Word Benchmark (800M tokens of WMT 2011 news)"
_ALLENNLP_MODELS = [
    _allennlp(
        "small",
        "2x1024_128_2048cnn_1xhighway",
        "elmo_2x1024_128_2048cnn_1xhighway",
        "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5",
        _ONE_BILLION,
        "13.6M",
        pinned=(54_402_456, "747ba97abce8a5f446558369e10bb0f7931437a46867476fdd156f5d7f576229"),
    ),
    _allennlp(
        "medium",
        "2x2048_256_2048cnn_1xhighway",
        "elmo_2x2048_256_2048cnn_1xhighway",
        "elmo_2x2048_256_2048cnn_1xhighway_weights.hdf5",
        _ONE_BILLION,
        "28.0M",
    ),
    _allennlp(
        "original",
        "2x4096_512_2048cnn_2xhighway",
        "elmo_2x4096_512_2048cnn_2xhighway",
        "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5",
        _ONE_BILLION,
        "93.6M",
        pinned=(374_434_792, "a6b92b9ccbb13fe489faacd2221c795d4bebe84b75f8aded9d85ea464fa5c994"),
    ),
    _allennlp(
        "original-5.5B",
        "2x4096_512_2048cnn_2xhighway_5.5B",
        "elmo_2x4096_512_2048cnn_2xhighway_5.5B",
        "elmo_2x4096_512_2048cnn_2xhighway_5.5B_weights.hdf5",
        "Wikipedia (1.9B tokens) and WMT 2008-2012 news (3.6B)",
        "93.6M",
    ),
    _allennlp(
        "pubmed",
        "contributed/pubmed",
        "elmo_2x4096_512_2048cnn_2xhighway",
        "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5",
        "PubMed abstracts (contributed)",
        "93.6M",
    ),
    _allennlp(
        "pt", "contributed/pt", "elmo_pt", "elmo_pt_weights.hdf5", "Portuguese text (contributed)", None, language="pt"
    ),
]

# ELMoForManyLangs: (language code, language, NLPL repository id), as listed in its README.
_EFML_LANGUAGES = [
    ("ar", "Arabic", 136),
    ("bg", "Bulgarian", 137),
    ("ca", "Catalan", 138),
    ("cs", "Czech", 139),
    ("cu", "Old Church Slavonic", 140),
    ("da", "Danish", 141),
    ("de", "German", 142),
    ("el", "Greek", 143),
    ("en", "English", 144),
    ("es", "Spanish", 145),
    ("et", "Estonian", 146),
    ("eu", "Basque", 147),
    ("fa", "Persian", 148),
    ("fi", "Finnish", 149),
    ("fr", "French", 150),
    ("ga", "Irish", 151),
    ("gl", "Galician", 152),
    ("grc", "Ancient Greek", 153),
    ("he", "Hebrew", 154),
    ("hi", "Hindi", 155),
    ("hr", "Croatian", 156),
    ("hu", "Hungarian", 157),
    ("id", "Indonesian", 158),
    ("it", "Italian", 159),
    ("ja", "Japanese", 160),
    ("ko", "Korean", 161),
    ("la", "Latin", 162),
    ("lv", "Latvian", 163),
    ("nl", "Dutch", 164),
    ("nb", "Norwegian Bokmål", 165),
    ("nn", "Norwegian Nynorsk", 166),
    ("pl", "Polish", 167),
    ("pt", "Portuguese", 168),
    ("ro", "Romanian", 169),
    ("ru", "Russian", 170),
    ("sk", "Slovak", 171),
    ("sl", "Slovene", 172),
    ("sv", "Swedish", 173),
    ("tr", "Turkish", 174),
    ("ug", "Uyghur", 175),
    ("uk", "Ukrainian", 176),
    ("ur", "Urdu", 177),
    ("vi", "Vietnamese", 178),
    ("zh", "Chinese (traditional)", 179),
]

# Languages spaCy has no tokenizer class for: their pipelines use the multi-language "xx".
_SPACY_LANGUAGE = {"cu": "xx", "gl": "xx", "ug": "xx"}


def _efml(code: str, language: str, nlpl_id: int) -> PublishedModel:
    return PublishedModel(
        name=f"efml-{code}",
        language=code,
        format=EFML,
        files=(RemoteFile(f"{_NLPL_EFML}/{nlpl_id}.zip", f"{nlpl_id}.zip"),),
        trained_on=f"{language}: 20M words of the CoNLL 2018 shared task raw text (Wikipedia + Common Crawl)",
        licence=_UNSTATED_LICENCE,
        citation=CHE_2018,
        source="https://github.com/HIT-SCIR/ELMoForManyLangs",
    )


def _nlpl(
    nlpl_id: int,
    language: str,
    trained_on: str,
    input_attr: str,
    citation: str,
    source: str,
    licence: str = _UNSTATED_LICENCE,
    vocabulary_size: Optional[int] = None,
) -> PublishedModel:
    """An ELMo model of the NLPL repository: a zip of the bilm-tf files (options.json, model.hdf5)."""
    return PublishedModel(
        name=f"nlpl-{nlpl_id}",
        language=language,
        format=BILM_TF,
        files=(RemoteFile(f"{_NLPL_20}/{nlpl_id}.zip", f"{nlpl_id}.zip"),),
        trained_on=trained_on,
        licence=licence,
        citation=f"{citation}; hosted by the NLPL Vector Repository ({NLPL_REPOSITORY})",
        source=source,
        input_attr=input_attr,
        vocabulary_size=vocabulary_size,
    )


_NORELMO = "https://wiki.nlpl.eu/Vectors/norlm/elmo"
_NO_WIKI = "Norwegian Wikipedia (September 2020 dump, about 160M words), tokenized with UDPipe"
_NORBERT_CORPUS = "the NorBERT corpus (Norwegian Wikipedia + Norsk Aviskorpus), tokenized with UDPipe"
_RUSVECTORES = "https://rusvectores.org/en/models/"
_SEMEVAL = "https://github.com/akutuzov/semeval2020"
_SEMEVAL_CORPUS = "{}: the SemEval-2020 Task 1 corpus (both periods), lemmatized as the task distributes it"
_NLPL_MODELS = [
    _nlpl(210, "nb", f"{_NO_WIKI}; lemmatized", "LEMMA", NORLM_2021, _NORELMO, licence=_NORLM_LICENCE),
    _nlpl(211, "nb", _NO_WIKI, "ORTH", NORLM_2021, _NORELMO, licence=_NORLM_LICENCE),
    _nlpl(
        217,
        "nb",
        f"NorELMo30: {_NORBERT_CORPUS}",
        "ORTH",
        NORLM_2021,
        _NORELMO,
        licence=_NORLM_LICENCE,
        vocabulary_size=30_000,
    ),
    _nlpl(
        218,
        "nb",
        f"NorELMo100: {_NORBERT_CORPUS}",
        "ORTH",
        NORLM_2021,
        _NORELMO,
        licence=_NORLM_LICENCE,
        vocabulary_size=100_000,
    ),
    _nlpl(
        195,
        "ru",
        "Russian National Corpus + Russian Wikipedia (December 2018)",
        "ORTH",
        KUTUZOV_KUZMENKO_2019,
        _RUSVECTORES,
    ),
    _nlpl(
        196,
        "ru",
        "Russian National Corpus + Russian Wikipedia (December 2018); lemmatized",
        "LEMMA",
        KUTUZOV_KUZMENKO_2019,
        _RUSVECTORES,
    ),
    _nlpl(199, "ru", "Taiga corpus (2019); lemmatized", "LEMMA", KUTUZOV_KUZMENKO_2019, _RUSVECTORES),
    _nlpl(209, "en", _SEMEVAL_CORPUS.format("English"), "LEMMA", KUTUZOV_GIULIANELLI_2020, _SEMEVAL),
    _nlpl(201, "de", _SEMEVAL_CORPUS.format("German"), "LEMMA", KUTUZOV_GIULIANELLI_2020, _SEMEVAL),
    _nlpl(203, "la", _SEMEVAL_CORPUS.format("Latin"), "LEMMA", KUTUZOV_GIULIANELLI_2020, _SEMEVAL),
    _nlpl(202, "sv", _SEMEVAL_CORPUS.format("Swedish"), "LEMMA", KUTUZOV_GIULIANELLI_2020, _SEMEVAL),
]

CATALOGUE: Dict[str, PublishedModel] = {
    model.name: model for model in [*_ALLENNLP_MODELS, *(_efml(*entry) for entry in _EFML_LANGUAGES), *_NLPL_MODELS]
}

# Codes that name a group of languages in the catalogue: Norwegian is Bokmål and Nynorsk.
_MACROLANGUAGES = {"no": ("nb", "nn")}


def get_model(name: str) -> PublishedModel:
    """The catalogue entry ``name``; a clear error listing close names otherwise."""
    if name in CATALOGUE:
        return CATALOGUE[name]
    lowered = {key.lower(): key for key in CATALOGUE}
    if name.lower() in lowered:
        return CATALOGUE[lowered[name.lower()]]
    import difflib

    close = difflib.get_close_matches(name, list(CATALOGUE), n=4)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise UnknownModelError(
        f"No published model named {name!r}.{hint} `python -m spacy_elmo models` lists all "
        f"{len(CATALOGUE)}; a local biLM directory or an http(s)/file URL works too."
    )


def models_for_language(language: str) -> List[PublishedModel]:
    """The models of ``language`` (an ISO code; "no" finds both Norwegian written standards)."""
    codes = _MACROLANGUAGES.get(language, (language,))
    return [model for model in CATALOGUE.values() if model.language in codes]
