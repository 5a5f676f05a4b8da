"""Whole spaCy pipelines around a biLM: assemble one, and package it as a wheel.

    python -m spacy_elmo package original packages/      # -> packages/en_elmo_original-0.0.1/dist/*.whl
    python -m spacy_elmo package runs/mini/bilm packages/ --name mini   # -> packages/en_elmo_mini-0.0.1/

A pipeline is the language's blank pipeline (its own tokenizer), a ``sentencizer`` (the biLM reads
sentences), for models trained on lemmas spaCy's lemmatizer, and the ``elmo`` component with the
weights inside. Published models carry their
licence, source and citation into ``meta.json``.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Dict, Iterable, List, Optional, Union
from urllib.parse import urlparse

import spacy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example

from ..hub.cache import is_url, recorded_source, resolve_weights
from ..hub.catalogue import CATALOGUE, PublishedModel, get_model
from .centering import text_lines
from .centering_fit import docs_from_texts
from .token_input import LEMMA, lookup_lemmatizer_config

PathLike = Union[str, Path]


def assemble_pipeline(
    weights: PathLike,
    lang: Optional[str] = None,
    name: str = "elmo",
    version: str = "0.0.1",
    meta: Optional[Dict[str, Any]] = None,
    elmo_config: Optional[Dict[str, Any]] = None,
    centering_docs: Optional[Callable[[Language], Iterable[Doc]]] = None,
) -> Language:
    """blank(lang) + sentencizer + elmo, initialized with ``weights`` (a path, name or URL), with
    spaCy's lookup lemmatizer before elmo where the biLM reads lemmas (``token_input``). ``lang``
    defaults to a catalogue model's language (its ``source.json``), else English.
    ``elmo_config``: more settings of the elmo component; ``centering_docs``: the text the elmo
    component estimates the common direction of its vectors from, as docs of the pipeline's vocab
    (see ``text_docs``), made when it is initialized; given, it turns ``center_vectors`` on."""
    lemmas_before_download(weights, lang, elmo_config)
    record = recorded_source(resolve_weights(weights))
    language = lang or record.get("spacy_language") or "en"
    nlp = spacy.blank(language)
    nlp.add_pipe("sentencizer")
    elmo_config = elmo_config or {}
    if (elmo_config.get("input_attr") or record.get("input_attr")) == LEMMA:
        nlp.add_pipe("lemmatizer", config=lookup_lemmatizer_config(language))
    centring = {"center_vectors": True} if centering_docs else {}
    nlp.add_pipe("elmo", config={"weights": str(weights), **centring, **elmo_config})
    nlp.initialize((lambda: (Example(doc, doc) for doc in centering_docs(nlp))) if centering_docs else None)
    nlp.meta.update(name=name, version=version)
    nlp.meta.update(meta or {})
    return nlp


def lemmas_before_download(
    weights: PathLike, lang: Optional[str], elmo_config: Optional[Dict[str, Any]] = None
) -> None:
    """For a catalogue model that reads lemmas, whether spaCy can lemmatize its language (the lemmas
    extra installed, a table for the language), asked before its download rather than after."""
    model = CATALOGUE.get(str(weights))
    if model is not None and ((elmo_config or {}).get("input_attr") or model.input_attr) == LEMMA:
        lookup_lemmatizer_config(lang or model.spacy_language)


def elmo_component_names(pipeline: PathLike) -> List[str]:
    """The names of the elmo components of a saved pipeline (a directory, or an installed pipeline
    package's name), read from its config.cfg without loading it; ``[]`` where it has none or is
    no saved pipeline."""
    from spacy.util import get_package_path, is_package, load_config

    config = Path(pipeline) / "config.cfg"
    if not config.is_file() and is_package(str(pipeline)):
        config = next(get_package_path(str(pipeline)).glob("*/config.cfg"), config)  # the package's data
    if not config.is_file():
        return []  # not a saved pipeline: spacy.load says so
    components = load_config(config, interpolate=False)["components"]
    return [name for name, settings in components.items() if settings.get("factory") == "elmo"]


def text_docs(path: PathLike) -> Callable[[Language], Iterable[Doc]]:
    """The lines of a .txt file (or of a folder's .txt files) as docs, split into sentences by the
    pipeline's components before elmo."""
    lines = text_lines(path)
    return lambda nlp: docs_from_texts(nlp, "elmo", lines)


def published_pipeline(
    model: PublishedModel,
    version: str = "0.0.1",
    lang: Optional[str] = None,
    progress: bool = True,
    centering_text: Optional[PathLike] = None,
) -> Language:
    """A pipeline around a catalogue model, its licence and citation in the meta, with spaCy's
    lemmatizer for a model trained on lemmas (refused before any download where spaCy has no
    lemma data for the language); with
    ``centering_text`` (a .txt file or folder) its vector hooks centre the vectors (``center_vectors``)
    on the mean estimated from that text."""
    language = lang or model.spacy_language
    if model.input_attr == LEMMA:
        lookup_lemmatizer_config(language)  # before the download: can spaCy lemmatize this language?
    weights = resolve_weights(model.name, progress=progress)
    meta = {
        "description": f"ELMo contextual vectors from the published '{model.name}' biLM ({model.trained_on}). "
        + (
            "It reads lemmas, set by spaCy's lookup lemmatizer (its table inside). "
            if model.input_attr == LEMMA
            else ""
        )
        + f"Cite: {model.citation}",
        "license": model.licence,
        "sources": [{"name": f"ELMo '{model.name}'", "url": model.source, "license": model.licence}],
        "url": model.source,
    }
    docs = text_docs(centering_text) if centering_text else None
    return assemble_pipeline(weights, language, package_name(model.name), version, meta, None, docs)


def package_name(model_name: str) -> str:
    """The pipeline name of a published model: "original-5.5B" -> "elmo_original_5_5b"."""
    return "elmo_" + re.sub(r"[^a-z0-9]+", "_", model_name.lower()).strip("_")


def package_pipeline(nlp: Language, output_dir: PathLike) -> Path:
    """``spacy package`` as a wheel: returns the package folder (``OUT/<lang>_<name>-<version>``)."""
    from spacy.cli.package import package

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="elmo-pipeline-") as folder:
        nlp.to_disk(folder)
        package(Path(folder), output_dir, create_sdist=False, create_wheel=True, force=True, silent=True)
    return output_dir / f"{nlp.lang}_{nlp.meta['name']}-{nlp.meta['version']}"


def package_weights(
    weights: str,
    output_dir: PathLike,
    version: str = "0.0.1",
    lang: Optional[str] = None,
    name: Optional[str] = None,
    centering_text: Optional[PathLike] = None,
) -> Path:
    """Package what the elmo component's ``weights`` takes: a catalogue name (``package_published``),
    a URL, a native biLM folder or an original release folder (options.json and weights.hdf5); the
    package folder. ``name``: the pipeline's (``elmo_NAME``), by default the folder's or file's."""
    if weights in CATALOGUE and not Path(weights).exists():
        return package_published(weights, output_dir, version=version, lang=lang, centering_text=centering_text)
    stem = name or _weights_stem(weights)
    meta = {"description": f"ELMo contextual vectors from the biLM {stem} ({weights})."}
    docs = text_docs(centering_text) if centering_text else None
    return package_pipeline(assemble_pipeline(weights, lang, package_name(stem), version, meta, None, docs), output_dir)


def _weights_stem(weights: str) -> str:
    """What a biLM's pipeline is named after: its folder's name, or its URL's file's."""
    if is_url(weights):
        return PurePosixPath(urlparse(weights).path).name.split(".")[0] or "bilm"
    return Path(weights).expanduser().resolve().name


def package_published(
    name: str,
    output_dir: PathLike,
    version: str = "0.0.1",
    lang: Optional[str] = None,
    progress: bool = True,
    centering_text: Optional[PathLike] = None,
) -> Path:
    """Download, convert, assemble and package a catalogue model; returns the package folder."""
    nlp = published_pipeline(get_model(name), version, lang, progress, centering_text)
    return package_pipeline(nlp, output_dir)
