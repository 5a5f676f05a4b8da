"""The typed requests and answers of every route, as msgspec Structs: what ``openapi`` writes the
service's OpenAPI document from, and what the suite checks every answer it gets against.

The request bodies are made for the service's limits (``request_bodies``), from the choices and
fields the gateway's parsers check (``requests``, ``openai_api``): the parsers stay as they are,
for their messages and their speed, and a test holds that they accept exactly the bodies these
types describe. The answers are written by orjson (``responses``, ``openai_api``), for its float32
numbers, in the shapes declared here.
"""

import functools
from typing import Annotated, Any, Dict, List, Literal, Optional, Tuple, Union

from msgspec import UNSET, Meta, Struct, UnsetType, defstruct

from .openai_api import ENCODINGS
from .requests import DTYPES, TOKEN_OUTPUTS, ServeLimits

Number = Annotated[Optional[float], Meta(description="a float32 (or float16) value; null where it is not finite")]
Vector = Annotated[List[Number], Meta(description="2P numbers")]


def _choice(choices: Tuple[str, ...], description: str) -> Any:
    """A string that must be one of ``choices`` (the first is the default)."""
    return Annotated[str, Meta(extra_json_schema={"enum": list(choices)}, description=description)]


def embed_request_body(limits: ServeLimits) -> Any:
    """``POST /embed``'s body within ``limits``: a Struct type, annotated with its rule of texts or words."""
    return request_bodies(limits)[0]


def openai_request_body(limits: ServeLimits) -> Any:
    """``POST /v1/embeddings``' body within ``limits``: a Struct type."""
    return request_bodies(limits)[1]


@functools.lru_cache(maxsize=8)
def request_bodies(limits: ServeLimits) -> Tuple[Any, Any]:
    """The bodies of ``POST /embed`` and ``POST /v1/embeddings`` within ``limits``: two Struct
    types, the first annotated with its rule of texts or words. Made once for each ``limits``: one
    type of each name goes in a document."""
    text = Annotated[str, Meta(max_length=limits.max_chars)]
    doc = Annotated[List[Annotated[str, Meta(min_length=1)]], Meta(max_length=limits.max_words)]
    some_text = Annotated[str, Meta(pattern=r"\S", max_length=limits.max_chars)]
    embed = defstruct(
        "EmbedBody",
        [
            ("texts", Union[_docs(text, limits, "the docs, as texts"), UnsetType], UNSET),
            ("words", Union[_docs(doc, limits, "the docs, as lists of words"), UnsetType], UNSET),
            ("tokens", _choice(TOKEN_OUTPUTS, "per token: the mixed vector, every layer, nothing"), TOKEN_OUTPUTS[0]),
            ("dtype", _choice(DTYPES, "the precision of the numbers in the answer"), DTYPES[0]),
        ],
        forbid_unknown_fields=True,
    )
    embed.__doc__ = 'Docs to embed: "texts" (tokenized by the pipeline) or "words" (pre-tokenized), not both.'
    openai = defstruct(
        "OpenAIEmbeddingsBody",
        [
            ("input", Union[some_text, _docs(some_text, limits, "the texts")]),
            ("model", Annotated[str, Meta(min_length=1, description="any name, echoed back: one model is served")]),
            ("encoding_format", _choice(ENCODINGS, "float lists, or base64 of little-endian float32"), ENCODINGS[0]),
            ("dimensions", Annotated[Optional[int], Meta(description="the model's width (GET /metadata)")], None),
            ("user", Annotated[Optional[str], Meta(description="unused")], None),
        ],
        forbid_unknown_fields=True,
    )
    openai.__doc__ = "OpenAI's embeddings request: text in (token ids are refused: the service reads text)."
    either = Meta(extra_json_schema={"oneOf": [{"required": ["texts"]}, {"required": ["words"]}]})
    return Annotated[embed, either], openai


def _docs(each: Any, limits: ServeLimits, description: str) -> Any:
    """A list of 1 to ``limits.max_docs`` of ``each``."""
    return Annotated[List[each], Meta(min_length=1, max_length=limits.max_docs, description=description)]


class Sentence(Struct, forbid_unknown_fields=True):
    """A sentence of a doc: its tokens start to end and their pooled vector."""

    start: int
    end: int
    vector: Vector


class EmbeddedDoc(Struct, forbid_unknown_fields=True):
    """One doc: its words, its vector and its sentences' (the mean of the tokens' mixed vectors), and
    per token as the request asked: vectors (n, 2P) for "mix", layers (n, L+1, 2P) for "layers"."""

    words: List[str]
    vector: Vector
    sentences: List[Sentence]
    vectors: Union[List[Vector], UnsetType] = UNSET
    layers: Union[List[List[Vector]], UnsetType] = UNSET


class EmbedAnswer(Struct, forbid_unknown_fields=True):
    """POST /embed's answer: one entry per doc sent, in order."""

    docs: List[EmbeddedDoc]


class OpenAIEmbedding(Struct, forbid_unknown_fields=True):
    """One input's vector (the doc's), as numbers or base64 of little-endian float32."""

    object: Literal["embedding"]
    index: int
    embedding: Union[List[float], str]


class OpenAIUsage(Struct, forbid_unknown_fields=True):
    """The pipeline's tokens."""

    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingsAnswer(Struct, forbid_unknown_fields=True):
    """POST /v1/embeddings' answer, in OpenAI's form."""

    object: Literal["list"]
    data: List[OpenAIEmbedding]
    model: str
    usage: OpenAIUsage


class ErrorAnswer(Struct, forbid_unknown_fields=True):
    """An error on every route but /v1/embeddings: what was wrong and how to fix it."""

    error: str


class OpenAIErrorDetail(Struct, forbid_unknown_fields=True):
    message: str
    type: str
    param: Optional[str]
    code: Optional[str]


class OpenAIErrorAnswer(Struct, forbid_unknown_fields=True):
    """An error of /v1/embeddings, in OpenAI's form (its clients raise it with its message)."""

    error: OpenAIErrorDetail


class HealthAnswer(Struct, forbid_unknown_fields=True):
    """The service answers."""

    status: Literal["ok"]


class ReadyAnswer(Struct, forbid_unknown_fields=True):
    """Whether a replica answers and the service is not draining (503 where not)."""

    ready: bool


class PipelineAbout(Struct, forbid_unknown_fields=True):
    name: Optional[str]
    version: Optional[str]
    lang: str


class ElmoAbout(Struct, forbid_unknown_fields=True):
    """The biLM: L+1 layers of width (2P) numbers, its precision, device and kernels."""

    layers: int
    width: int
    precision: str
    device: str
    kernel: str
    kernels: Dict[str, Any]


class BatchingAbout(Struct, forbid_unknown_fields=True):
    on: bool
    max_batch_tokens: int
    max_wait_ms: float


class LimitsAbout(Struct, forbid_unknown_fields=True):
    """The most one request may hold (more is a 413)."""

    max_body_bytes: int
    max_docs: int
    max_chars: int
    max_words: int


class ReplicaAbout(Struct, forbid_unknown_fields=True):
    """What a replica says of itself (``Replicas.describe``): the pipeline, the biLM, the package's
    version and the replica (host:pid)."""

    pipeline: PipelineAbout
    components: List[str]
    elmo: ElmoAbout
    spacy_elmo: str
    replica: str


class MetadataAnswer(Struct, forbid_unknown_fields=True):
    """GET /metadata: the pipeline, the biLM, the replica that answered and the service's settings."""

    pipeline: PipelineAbout
    components: List[str]
    elmo: ElmoAbout
    spacy_elmo: str
    replica: str
    batching: BatchingAbout
    max_concurrent_requests: Optional[int]
    api_key: Annotated[bool, Meta(description="whether the service asks for a key")]
    limits: LimitsAbout
