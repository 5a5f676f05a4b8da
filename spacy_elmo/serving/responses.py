"""What ``POST /embed`` answers: the docs of several requests run through the pipeline together
(``nlp.pipe``), then split back, one payload per request. A doc's vectors do not depend on its
batch, so each request gets bitwise what ``nlp(text)`` alone gives it.

Each doc of a payload: ``words``; ``vector`` (2P,), its ``sentences`` (``start``, ``end`` in tokens
and ``vector``); per token, as the request asks, ``vectors`` (n, 2P) mixed or ``layers``
(n, L+1, 2P). Numbers are JSON floats in the shortest form that reads back as the same float32
(orjson's), or, with ``"dtype": "float16"``, as the same float16: orjson writes a float16 as the
float32 it widens to ("-0.117492676" for float16's "-0.1175"), so float16 arrays are written here,
each number looked up in a table of the 65,536 float16 values' shortest forms.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np
import orjson
from spacy.language import Language
from spacy.tokens import Doc

from ..pipeline.extensions import pooled
from ..pipeline.storage import mixed_vectors, stored_layers
from .openai_api import openai_body
from .requests import EmbedRequest


def embed_requests(nlp: Language, requests: Sequence[EmbedRequest]) -> Tuple[List[bytes], int]:
    """The JSON body of the answer to each of ``requests``, all their docs run in one ``nlp.pipe``,
    and how many tokens they held."""
    inputs: List[Union[str, Doc]] = []
    for request in requests:
        if request.texts is not None:
            inputs.extend(request.texts)
        else:
            inputs.extend(Doc(nlp.vocab, words=list(words)) for words in request.words or ())
    docs = list(nlp.pipe(inputs))
    answers, start = [], 0
    for request in requests:
        answers.append(answer(docs[start : start + request.n_docs], request))
        start += request.n_docs
    return answers, sum(len(doc) for doc in docs)


def answer(docs: Sequence[Doc], request: EmbedRequest) -> bytes:
    """One request's answer: ``/embed``'s form, or OpenAI's where it came by ``/v1/embeddings``."""
    if request.openai is not None:
        return openai_body(docs, request.openai)
    dtype = np.float16 if request.dtype == "float16" else np.float32
    payload = {"docs": [doc_payload(doc, request.tokens, dtype) for doc in docs]}
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


def doc_payload(doc: Doc, tokens: str, dtype: type) -> Dict[str, Any]:
    """One doc's words and vectors; ``tokens``: "mix", "layers" or "none" (see the module docstring).
    The tokens' mixed vectors are computed once, and pooled for the doc and each sentence."""
    mixed = mixed_vectors(doc, slice(0, len(doc)))
    payload: Dict[str, Any] = {
        "words": [token.text for token in doc],
        "vector": _numbers(pooled(doc, 0, len(doc), mixed), dtype),
        "sentences": [
            {"start": sent.start, "end": sent.end, "vector": _numbers(pooled(doc, sent.start, sent.end, mixed), dtype)}
            for sent in _sentences(doc)
        ],
    }
    if tokens == "mix":
        payload["vectors"] = _numbers(mixed, dtype)
    elif tokens == "layers":
        payload["layers"] = _numbers(stored_layers(doc).transpose(1, 0, 2), dtype)
    return payload


def _sentences(doc: Doc) -> list:
    return list(doc.sents) if doc.has_annotation("SENT_START") else [doc[:]]


def _numbers(values: np.ndarray, dtype: type) -> Union[np.ndarray, orjson.Fragment]:
    """``values`` for orjson: float32 as an array, float16 as JSON text already written."""
    if dtype is np.float16:
        return orjson.Fragment(float16_json(np.asarray(values, dtype=np.float16)))
    return np.ascontiguousarray(values, dtype=dtype)


def float16_json(values: np.ndarray) -> str:
    """``values`` (any shape) as nested JSON arrays of each float16's shortest form; null where not finite."""
    forms = _float16_forms()[np.ascontiguousarray(values).view(np.uint16)]
    return _nested(forms)


def _nested(forms: np.ndarray) -> str:
    if forms.ndim == 1:
        return "[" + ",".join(forms.tolist()) + "]"
    return "[" + ",".join(_nested(row) for row in forms) + "]"


@functools.lru_cache(maxsize=1)
def _float16_forms() -> np.ndarray:
    """The shortest decimal that reads back as each float16, by its 16 bits (made once, at the first float16 answer)."""
    forms = []
    for value in np.arange(2**16, dtype=np.uint16).view(np.float16):
        if not np.isfinite(value):
            forms.append("null")  # as orjson writes a float that is not finite
            continue
        positional = np.format_float_positional(value, unique=True, trim="0")
        scientific = np.format_float_scientific(value, unique=True, trim="-")
        forms.append(positional if len(positional) <= len(scientific) else scientific)
    return np.array(forms, dtype=object)
