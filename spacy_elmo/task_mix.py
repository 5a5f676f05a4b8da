"""ELMo in downstream models: each task learns its own mix of the frozen biLM's layers.

    ELMo_k^task = gamma * sum_j softmax(s)_j * h_{k,j}                (Peters et al., 2018, eq. 1)

The ``elmo`` component runs frozen before the task (``frozen_components`` and
``annotating_components`` in ``spacy train``), so the layers are already on each doc as
``doc._.elmo_data`` (the component's default ``store = "layers"``); the task layers read them from
there, with no gradient into the biLM.

- ``spacy-elmo.TaskMix.v1``: docs -> the task's mix per token (n, width). Learned s (init 0: the
  plain average) and gamma (init 1); dropout on the mix (0.5 by default, as in the paper); an L2
  penalty ``l2 * ||s||^2`` per token of the batch, added to the gradient of s at every update, so
  that ``l2`` weighs against a per-token task loss as the paper's lambda does whatever the batch
  size (1 keeps the mix near the average, 0.001 lets it move); optional per-layer standardization.
- ``spacy-elmo.ElmoEmbed.v1``: [x_k; ELMo_k]: a spaCy embedding (e.g. ``spacy.MultiHashEmbed.v2``)
  concatenated with a TaskMix and projected to ``width``; the ``embed`` of ``spacy.Tok2Vec.v2``.
- ``spacy-elmo.ElmoTok2Vec.v1``: also adds ELMo at the task encoder's output: [h_k; ELMo_k].
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats2d, Floats3d

from .storage import kept, stored_layers


@registry.architectures("spacy-elmo.TaskMix.v1")
def TaskMix(
    width: int, n_layers: int = 3, dropout: float = 0.5, l2: float = 0.001, layer_norm: bool = False
) -> Model[List[Doc], List[Floats2d]]:
    """width: the biLM's output width (2P: 1024 for the original, 256 for small); n_layers: L + 1."""
    if width < 1 or n_layers < 1 or not 0 <= dropout < 1 or l2 < 0:
        raise ValueError(
            f"TaskMix needs width, n_layers >= 1, 0 <= dropout < 1 and l2 >= 0; got {width}, {n_layers}, {dropout}, "
            f"{l2}."
        )
    return Model(
        "elmo_task_mix",
        _mix_forward,
        init=_mix_init,
        dims={"nO": width, "nL": n_layers},
        params={"s": None, "gamma": None},
        attrs={"dropout": dropout, "l2": l2, "layer_norm": layer_norm, "sample_ids": frozenset()},
    )


def _mix_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    model.set_param("s", model.ops.alloc1f(model.get_dim("nL")))
    model.set_param("gamma", model.ops.asarray1f([1.0]))
    if X is not None:  # shape inference passes initialization samples before the elmo component ran
        model.attrs["sample_ids"] = frozenset(id(doc) for doc in X)


def mix_weights(model: Model) -> Tuple[np.ndarray, float]:
    """The learned mix: (softmax(s) as numpy (L+1,), gamma)."""
    s = model.ops.to_numpy(model.get_param("s"))
    weights = np.exp(s - s.max())
    return weights / weights.sum(), float(model.ops.to_numpy(model.get_param("gamma"))[0])


def _mix_forward(model: Model, docs: List[Doc], is_train: bool):
    ops = model.ops
    s, gamma = model.get_param("s"), model.get_param("gamma")
    weights = ops.softmax(s)
    layers = [_layers(model, doc) for doc in docs]
    averaged = [ops.xp.tensordot(weights, h, axes=1) for h in layers]  # (n, width) before gamma
    rate = model.attrs["dropout"] if is_train else 0.0
    masks = [ops.get_dropout_mask(a.shape, rate) if rate else None for a in averaged]
    outputs = [gamma[0] * a * (m if m is not None else 1.0) for a, m in zip(averaged, masks)]

    def backprop(d_outputs: List[Floats2d]) -> List[Doc]:
        d_weights = ops.alloc1f(weights.shape[0])
        d_gamma = 0.0
        for h, a, m, d_y in zip(layers, averaged, masks, d_outputs):
            d_y = d_y * m if m is not None else d_y
            d_gamma += float((a * d_y).sum())
            d_weights += gamma[0] * (h * d_y[None]).sum(axis=(1, 2))
        n_tokens = sum(len(doc) for doc in docs)  # spaCy's task losses sum over tokens: so does the penalty
        d_s = weights * (d_weights - (weights * d_weights).sum()) + 2 * model.attrs["l2"] * n_tokens * s
        model.inc_grad("s", d_s)
        model.inc_grad("gamma", ops.asarray1f([d_gamma]))
        return []

    return outputs, backprop


def _layers(model: Model, doc: Doc) -> Floats3d:
    data = doc._.elmo_data
    n_layers, width = model.get_dim("nL"), model.get_dim("nO")
    if data is None:
        if id(doc) in model.attrs["sample_ids"]:
            return model.ops.alloc3f(n_layers, len(doc), width)
        if kept(doc) is not None:
            stored_layers(doc)  # raises: the elmo component keeps only mixed vectors; says which setting to change
        raise ValueError(
            "A doc reached the task's ELMo mix without ELMo layers: the 'elmo' component must run before "
            "this component (in training, list it in [training] frozen_components and annotating_components)."
        )
    if data.shape[0] != n_layers or data.shape[2] != width:
        raise ValueError(
            f"The elmo component gives layers of shape (L+1={data.shape[0]}, n, {data.shape[2]}) but the task mix "
            f"was configured for n_layers={n_layers}, width={width}: set them to match the biLM."
        )
    layers = model.ops.asarray3f(data)
    if model.attrs["layer_norm"]:
        layers = (layers - layers.mean(axis=2, keepdims=True)) / (layers.std(axis=2, keepdims=True) + 1e-6)
    return layers


@registry.architectures("spacy-elmo.ElmoEmbed.v1")
def ElmoEmbed(
    embed: Model[List[Doc], List[Floats2d]], mix: Model[List[Doc], List[Floats2d]], width: int
) -> Model[List[Doc], List[Floats2d]]:
    """[x_k; ELMo_k^task] projected to ``width`` (the encoder's width): ``embed`` is the task's own
    context-independent embedding, ``mix`` a TaskMix."""
    n_inputs = output_width(embed) + mix.get_dim("nO")
    model = chain(concatenate(embed, mix), with_array(Maxout(width, n_inputs, nP=3, normalize=True)))
    model.set_dim("nO", width)
    model.name = "elmo_embed"
    return model


@registry.architectures("spacy-elmo.ElmoTok2Vec.v1")
def ElmoTok2Vec(
    tok2vec: Model[List[Doc], List[Floats2d]], mix: Model[List[Doc], List[Floats2d]]
) -> Model[List[Doc], List[Floats2d]]:
    """The task encoder's output with ELMo added again, [h_k; ELMo_k^task] (the paper's option of
    using ELMo at the output of the task RNN). Width: tok2vec's + the mix's."""
    model = concatenate(tok2vec, mix)
    model.set_dim("nO", output_width(tok2vec) + mix.get_dim("nO"))
    model.name = "elmo_tok2vec"
    return model


def output_width(model: Model) -> int:
    """A layer's output width: its own nO, or that of the last sublayer which knows it (spaCy's
    embeddings leave nO unset on their outer chain)."""
    if model.has_dim("nO"):
        return model.get_dim("nO")
    for node in reversed(list(model.walk())):
        if node.has_dim("nO"):
            return node.get_dim("nO")
    raise ValueError(f"Cannot tell the output width of {model.name}; set its nO.")
