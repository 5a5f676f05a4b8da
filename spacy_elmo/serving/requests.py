"""What a client may send to ``POST /embed``, read and checked before anything runs: a body that is
not what this module describes is a ``BadRequest`` (status 4xx, and a message that says what was
wrong and how to send it right), never an error of the service.

    {"texts": ["The cat sat.", ...]}               texts, tokenized by the pipeline
    {"words": [["The", "cat", "sat", "."], ...]}   or pre-tokenized docs
    "tokens": "mix" (default) | "layers" | "none"  per token: the mixed vector, every layer, or nothing
    "dtype": "float32" (default) | "float16"       the numbers' precision in the response
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

TOKEN_OUTPUTS = ("mix", "layers", "none")
DTYPES = ("float32", "float16")


class BadRequest(Exception):
    """A request the service refuses: ``status`` (400, 413 or 422) and what to fix."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ServeLimits:
    """The most one request may ask for; larger requests get a 413 that names the limit."""

    max_body_bytes: int = 2**20
    max_docs: int = 64
    max_chars: int = 20000  # per text
    max_words: int = 2000  # per doc, pre-tokenized


@dataclass(frozen=True)
class OpenAIForm:
    """How ``POST /v1/embeddings`` wants its answer (``openai_api``): ``model`` echoed back, the
    embeddings as "float" lists or "base64" (little-endian float32)."""

    model: str
    encoding_format: str = "float"


@dataclass(frozen=True)
class EmbedRequest:
    """One request's docs, as texts or as words, and what it asks for each token; ``openai``: the
    answer in OpenAI's form (doc vectors only), where it came by that route."""

    texts: Optional[Tuple[str, ...]] = None
    words: Optional[Tuple[Tuple[str, ...], ...]] = None
    tokens: str = "mix"
    dtype: str = "float32"
    openai: Optional[OpenAIForm] = None

    @property
    def n_docs(self) -> int:
        return len(self.texts if self.texts is not None else self.words or ())

    @property
    def size(self) -> int:
        """Roughly how many tokens it carries (characters / 5 for texts): what batches are cut by."""
        if self.texts is not None:
            return sum(max(1, len(text) // 5) for text in self.texts)
        return sum(len(words) for words in self.words or ())


def parse_request(body: bytes, limits: ServeLimits) -> EmbedRequest:
    """``body`` (the raw bytes of a POST) as an ``EmbedRequest``; ``BadRequest`` where it is not one."""
    data = read_json(body, limits, 'send JSON such as {"texts": ["The cat sat."]}')
    if not isinstance(data, dict):
        raise BadRequest(422, f'expected a JSON object such as {{"texts": [...]}}, got {type(data).__name__}')
    unknown = sorted(set(data) - {"texts", "words", "tokens", "dtype"})
    if unknown:
        raise BadRequest(422, f"unknown fields {shown(unknown)}; the fields are texts or words, tokens, dtype")
    tokens = _choice(data, "tokens", TOKEN_OUTPUTS)
    dtype = _choice(data, "dtype", DTYPES)
    if ("texts" in data) == ("words" in data):
        raise BadRequest(422, 'send either "texts" (a list of strings) or "words" (a list of lists of strings)')
    if "texts" in data:
        return EmbedRequest(texts=checked_texts(data["texts"], "texts", limits), tokens=tokens, dtype=dtype)
    return EmbedRequest(words=_words(data["words"], limits), tokens=tokens, dtype=dtype)


def read_json(body: bytes, limits: ServeLimits, example: str) -> Any:
    """The JSON value of ``body``; a 400 (or 413) that says why where it has none. ``example``: how to
    send it right, for an empty body."""
    if not body:
        raise BadRequest(400, f"empty body: {example}")
    check_body_size(len(body), limits)
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise BadRequest(400, f"the body is not UTF-8 (byte {err.start}): encode the JSON as UTF-8") from None
    except json.JSONDecodeError as err:
        raise BadRequest(400, f"the body is not JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    except RecursionError:
        raise BadRequest(400, "the body's JSON is nested too deeply to read: send a flat object") from None
    except ValueError as err:  # a number past Python's 4,300 digits
        raise BadRequest(400, f"the body's JSON holds a value that cannot be read: {err}") from None


def check_body_size(size: int, limits: ServeLimits) -> None:
    """A 413 for a body of ``size`` bytes over the limit (read, or declared by Content-Length)."""
    if size > limits.max_body_bytes:
        raise BadRequest(413, f"body of {size:,} bytes; the limit is {limits.max_body_bytes:,}: send fewer docs")


def _choice(data: dict, field: str, allowed: Tuple[str, ...]) -> str:
    value = data.get(field, allowed[0])
    if not isinstance(value, str) or value not in allowed:
        raise BadRequest(422, f"{field} must be one of {list(allowed)}, got {shown(value)}")
    return value


def _docs(value: Any, field: str, limits: ServeLimits) -> List[Any]:
    if not isinstance(value, list) or not value:
        raise BadRequest(422, f"{field} must be a non-empty list, got {shown(value)}")
    if len(value) > limits.max_docs:
        raise BadRequest(413, f"{len(value)} docs in {field}; the limit is {limits.max_docs} a request")
    return value


def checked_texts(value: Any, field: str, limits: ServeLimits) -> Tuple[str, ...]:
    """``value`` as the texts of the request's ``field``: a non-empty list of strings within the limits."""
    texts = _docs(value, field, limits)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BadRequest(422, f"{field}[{i}] must be a string, got {shown(text)}")
        _check_unicode(text, f"{field}[{i}]")
        if len(text) > limits.max_chars:
            raise BadRequest(413, f"{field}[{i}] has {len(text):,} characters; the limit is {limits.max_chars:,}")
    return tuple(texts)


def _words(value: Any, limits: ServeLimits) -> Tuple[Tuple[str, ...], ...]:
    docs = _docs(value, "words", limits)
    for i, words in enumerate(docs):
        if not isinstance(words, list) or not all(isinstance(word, str) and word for word in words):
            raise BadRequest(422, f"words[{i}] must be a list of non-empty strings, got {shown(words)}")
        if len(words) > limits.max_words:
            raise BadRequest(413, f"words[{i}] has {len(words):,} words; the limit is {limits.max_words:,}")
        for j, word in enumerate(words):
            _check_unicode(word, f"words[{i}][{j}]")
    return tuple(tuple(words) for words in docs)


def _check_unicode(text: str, where: str) -> None:
    """A 422 for a string JSON allowed but Unicode does not: a lone UTF-16 surrogate (an escape such
    as \\ud800 with no partner), which no text can hold and no response can write back."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        code = f"\\u{ord(text[err.start]):04x}"
        raise BadRequest(
            422, f"{where} holds a lone UTF-16 surrogate ({code}) at character {err.start}: send valid Unicode"
        ) from None


def shown(value: Any) -> str:
    """A short JSON rendering of a client's value for a message (its type where it cannot be written)."""
    try:
        text = json.dumps(value)
    except (RecursionError, ValueError):
        return f"a {type(value).__name__} too deep or too large to show"
    return text if len(text) <= 60 else text[:57] + "..."
