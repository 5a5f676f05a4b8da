"""``POST /v1/embeddings`` as OpenAI's embeddings API defines it, so that existing clients (the
``openai`` package, LangChain, LlamaIndex, ...) speak to the service unchanged:

    {"input": "text" | ["text", ...], "model": "...", "encoding_format": "float" | "base64",
     "dimensions": 1024 (optional: the model's width, or a 422), "user": "..." (optional, unused)}
    -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] | "base64"}],
        "model": "...", "usage": {"prompt_tokens": n, "total_tokens": n}}

``embedding`` is the doc's vector (``doc._.elmo``, the mean of its tokens' mixed vectors); base64 holds
its float32 values little-endian. ``usage`` counts the pipeline's tokens. ``model`` is echoed back as
sent: one service serves one model. Token-id inputs are refused (the service reads text). Errors
take OpenAI's form, ``{"error": {"message", "type", "param", "code"}}``, so clients raise them
with their message.
"""

from __future__ import annotations

import base64
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import orjson
from spacy.tokens import Doc

from .requests import BadRequest, EmbedRequest, OpenAIForm, ServeLimits, checked_texts, read_json, shown

FIELDS = ("input", "model", "encoding_format", "dimensions", "user")
ENCODINGS = ("float", "base64")


def parse_openai_request(body: bytes, limits: ServeLimits, width: Optional[int] = None) -> EmbedRequest:
    """``body`` as an ``EmbedRequest`` answered in OpenAI's form; ``BadRequest`` where it is not one.
    ``width``: the model's vector width, which ``dimensions`` must equal where given."""
    data = read_json(body, limits, 'send JSON such as {"input": "The cat sat.", "model": "elmo"}')
    if not isinstance(data, dict):
        raise BadRequest(422, f'expected a JSON object such as {{"input": "...", "model": "elmo"}}, got {shown(data)}')
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise BadRequest(422, f"unknown fields {shown(unknown)}; the fields are {', '.join(FIELDS)}")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest(422, f'"model" must be a non-empty string (any name: one model is served), got {shown(model)}')
    encoding = data.get("encoding_format", "float")
    if encoding not in ENCODINGS:
        raise BadRequest(422, f"encoding_format must be one of {list(ENCODINGS)}, got {shown(encoding)}")
    dimensions = data.get("dimensions")
    if dimensions is not None and (width is None or dimensions != width):
        raise BadRequest(422, f"dimensions must be the model's width, {width}, or left out; got {shown(dimensions)}")
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise BadRequest(422, f"user must be a string, got {shown(user)}")
    texts = _inputs(data.get("input"), limits)
    return EmbedRequest(texts=texts, tokens="none", openai=OpenAIForm(model, encoding))


def _inputs(value: Any, limits: ServeLimits) -> Tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and value and all(isinstance(v, int) or isinstance(v, list) for v in value):
        raise BadRequest(422, "input holds token ids; this service reads text: send a string or a list of strings")
    texts = checked_texts(value, "input", limits)
    for i, text in enumerate(texts):
        if not text.strip():
            raise BadRequest(422, f"input[{i}] is empty: each input must hold some text")
    return texts


def openai_body(docs: Sequence[Doc], form: OpenAIForm) -> bytes:
    """The JSON answer of OpenAI's form for ``docs``."""
    data = [
        {"object": "embedding", "index": i, "embedding": _embedding(doc._.elmo, form.encoding_format)}
        for i, doc in enumerate(docs)
    ]
    tokens = sum(len(doc) for doc in docs)
    payload = {
        "object": "list",
        "data": data,
        "model": form.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


def _embedding(vector: np.ndarray, encoding: str) -> Any:
    values = np.ascontiguousarray(vector, dtype="<f4")
    return base64.b64encode(values.tobytes()).decode("ascii") if encoding == "base64" else values


def openai_error(status: int, message: str) -> Dict[str, Any]:
    """An error body in OpenAI's form (its ``type`` as OpenAI names the status's kind)."""
    kinds = {401: "authentication_error", 429: "rate_limit_error", 503: "service_unavailable"}
    kind = kinds.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
