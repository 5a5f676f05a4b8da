"""What a doc keeps of the biLM's output (the elmo component's ``store`` and ``store_dtype``
settings), and reading it back as float32.

- ``"layers"``: every layer, ``doc._.elmo_data`` (L+1, n, 2P); with vector hooks on, the mixed
  vectors also go to ``doc.tensor`` (n, 2P), where spaCy's own fallback finds them on docs whose
  hooks were not put back. Mixes are computed on access.
- ``"mix"``: only the mixed vectors, ``doc._.elmo_vectors`` (n, 2P).
- ``"tensor"``: only ``doc.tensor`` (n, 2P), the mixed vectors.

Every store also keeps ``doc._.elmo_mix``, one small dict per doc (the mix and its pooling), and,
when the component centres its vectors, ``doc._.elmo_centering``: the mean (2P,) and the removed
directions (D, 2P) in float32, (1 + D) x 2P x 4 bytes per doc (4 KB for the original model), so
that a doc rebuilt from bytes compares its vectors as the pipeline did.
User data survives ``Doc.to_bytes``, pickling, ``nlp.pipe(n_process=...)`` and
``DocBin(store_user_data=True)``; ``doc.tensor`` survives the first three, not ``DocBin``.
``store_dtype = "float16"`` halves the arrays; everything read from them is upcast to float32.

Bytes per token, b = 4 (float32) or 2 (float16): (L+1) x 2P x b for "layers" (plus 2P x b for
doc.tensor), 2P x b for "mix" and "tensor". The original model (L+1 = 3, 2P = 1024): 12 KB + 4 KB,
4 KB, 4 KB in float32; half that in float16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Union

import numpy as np
from spacy.tokens import Doc

from ..choices import choose
from .mix_settings import MixSettings, mix_layers

# store name -> writer(doc, layers (L+1, n, 2P) float32, mix, dtype, with_tensor)
Writer = Callable[[Doc, np.ndarray, MixSettings, type, bool], None]
DTYPES: Dict[str, type] = {"float32": np.float32, "float16": np.float16}
Indices = Union[slice, Sequence[int]]


def _keep_layers(doc: Doc, layers: np.ndarray, mix: MixSettings, dtype: type, with_tensor: bool) -> None:
    doc._.elmo_data = layers.astype(dtype, copy=False)
    if with_tensor:
        doc.tensor = mix_layers(layers, mix).astype(dtype, copy=False)


def _keep_mix(doc: Doc, layers: np.ndarray, mix: MixSettings, dtype: type, with_tensor: bool) -> None:
    doc._.elmo_vectors = mix_layers(layers, mix).astype(dtype, copy=False)


def _keep_tensor(doc: Doc, layers: np.ndarray, mix: MixSettings, dtype: type, with_tensor: bool) -> None:
    doc.tensor = mix_layers(layers, mix).astype(dtype, copy=False)


STORES: Dict[str, Writer] = {"layers": _keep_layers, "mix": _keep_mix, "tensor": _keep_tensor}
_MEANINGS = {
    "store": "'layers' keeps every layer (doc._.elmo_data), 'mix' only each token's mixed vector "
    "(doc._.elmo_vectors), 'tensor' only doc.tensor",
    "store_dtype": "'float16' halves what a doc keeps; it is read back as float32",
}


@dataclass(frozen=True)
class Storage:
    """The ``store`` and ``store_dtype`` settings, checked."""

    store: str = "layers"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        for setting, table, value in (("store", STORES, self.store), ("store_dtype", DTYPES, self.dtype)):
            try:
                choose(table, setting, value)
            except ValueError as err:
                raise ValueError(f"elmo: {str(err).rstrip('.')}: {_MEANINGS[setting]}.") from None

    def layers_dtype(self, with_tensor: bool) -> type:
        """The dtype ``keep`` takes the layers in without converting them: float16 where only float16
        layers are kept (the "layers" store without doc.tensor), float32 where mixed vectors are
        computed from them (from the float32 layers, as the other stores keep them)."""
        if self.store == "layers" and not with_tensor:
            return DTYPES[self.dtype]
        return np.float32

    def keep(self, doc: Doc, layers: np.ndarray, mix: MixSettings, with_tensor: bool) -> None:
        """Keep ``layers`` (L+1, n, 2P), float32 or ``layers_dtype``, on ``doc`` as this store says;
        ``with_tensor``: the "layers" store also writes the mixed vectors to doc.tensor."""
        for name in ("elmo_data", "elmo_vectors"):  # from an earlier run, maybe with another store
            if doc._.get(name) is not None:
                doc._.set(name, None)
        doc._.elmo_mix = mix.as_dict()
        STORES[self.store](doc, layers, mix, DTYPES[self.dtype], with_tensor)


def bytes_per_token(store: str, dtype: str, n_layers: int, width: int, with_tensor: bool = True) -> int:
    """What the arrays a doc keeps cost per token (their headers aside): n_layers is L+1, width 2P;
    with_tensor: vector hooks on (the "layers" store then writes doc.tensor too)."""
    rows = {"layers": n_layers + int(with_tensor), "mix": 1, "tensor": 1}
    return choose(rows, "store", store) * width * np.dtype(choose(DTYPES, "store_dtype", dtype)).itemsize


def store_of(doc: Doc) -> Optional[str]:
    """The store the doc's ELMo output is in ("layers", "mix" or "tensor"), None without any."""
    if doc._.elmo_data is not None:
        return "layers"
    if doc._.elmo_vectors is not None:
        return "mix"
    if doc._.elmo_mix is not None and doc.tensor.ndim == 2:
        return "tensor"
    return None


def mix_of(doc: Doc) -> MixSettings:
    """The mix stored on the doc, else the average of its layers."""
    stored = doc._.elmo_mix
    if stored:
        return MixSettings.from_dict(stored)
    return MixSettings.average(doc._.elmo_data.shape[0] if store_of(doc) == "layers" else 1)


def mixed_vectors(doc: Doc, indices: Indices) -> np.ndarray:
    """(k, 2P) float32: the mixed vectors of the doc's tokens at ``indices``."""
    store = _require(doc)
    if store == "layers":
        return mix_layers(np.asarray(doc._.elmo_data[:, indices], dtype=np.float32), mix_of(doc))
    source = doc._.elmo_vectors if store == "mix" else doc.tensor
    return np.array(source[indices], dtype=np.float32)  # a copy: changing it leaves the doc alone


def stored_layers(doc: Doc) -> np.ndarray:
    """(L+1, n, 2P) as kept (float32 or float16)."""
    store = _require(doc)
    if store != "layers":
        raise ValueError(
            f"This Doc keeps only the mixed ELMo vectors (the elmo component's store = {store!r}), not every "
            "layer: set store = \"layers\" in the component's settings (nlp.add_pipe('elmo', config={'store': "
            "'layers', ...}) or [components.elmo] in config.cfg) to keep them."
        )
    return doc._.elmo_data


def vector_width(doc: Doc) -> int:
    """2P, the size of the doc's ELMo vectors."""
    store = _require(doc)
    source = {"layers": doc._.elmo_data, "mix": doc._.elmo_vectors, "tensor": doc.tensor}[store]
    return int(source.shape[-1])


def _require(doc: Doc) -> str:
    store = store_of(doc)
    if store is None:
        raise ValueError(
            "This Doc has no ELMo vectors: run it through a pipeline with the 'elmo' component "
            "(nlp.add_pipe('elmo', ...)), and keep its user data when serializing it "
            "(DocBin(store_user_data=True); Doc.to_bytes keeps it unless excluded)."
        )
    return store
