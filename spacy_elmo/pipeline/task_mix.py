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

The shape of the layers a TaskMix reads, (L+1, n, 2P), is its dims ``nL`` = L+1 (``n_layers``) and
``nO`` = 2P (``width``). Both are optional, as thinc's nI and nO are: left out (null in a config),
they are filled in by whichever of these comes first,
  1. the ``elmo`` component earlier in the pipeline, before initialization (``listeners``),
  2. initialization, from the first doc of the sample that carries layers,
  3. the first forward pass that sees layers.
A value given, or filled in earlier, is checked against each of them, with an error that names
both values. With the dims known at initialization, thinc infers the input width of the layers
after the mix (ElmoEmbed's projection, the task's output layer after ElmoTok2Vec) from the sample,
as it does for any layer.

spaCy passes its initialization sample before the elmo component has run on it; the mix gives
those docs zeros of the right shape, and raises for any other doc without layers.
"""

# No ``from __future__ import annotations`` here: thinc 8.2 (spaCy 3.7) validates the registered
# functions' arguments by their annotations, and cannot resolve them as strings.
from typing import Callable, List, Optional, Tuple

import numpy as np
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats2d, Floats3d

from .storage import store_of, stored_layers


@registry.architectures("spacy-elmo.TaskMix.v1")
def TaskMix(
    width: Optional[int] = None,
    n_layers: Optional[int] = None,
    dropout: float = 0.5,
    l2: float = 0.001,
    layer_norm: bool = False,
) -> Model[List[Doc], List[Floats2d]]:
    """width: the biLM's output width (2P: 1024 for the original, 256 for small); n_layers: L + 1.
    None (the default) takes them from the elmo component or the docs' layers (module docstring)."""
    _check_settings(width, n_layers, dropout, l2)
    return Model(
        "elmo_task_mix",
        _mix_forward,
        init=_mix_init,
        dims={"nO": width, "nL": n_layers},
        params={"s": None, "gamma": None},
        attrs={"dropout": dropout, "l2": l2, "layer_norm": layer_norm, "sample_ids": frozenset()},
    )


def _check_settings(width: Optional[int], n_layers: Optional[int], dropout: float, l2: float) -> None:
    sizes_ok = all(size is None or size >= 1 for size in (width, n_layers))
    if not sizes_ok or not 0 <= dropout < 1 or l2 < 0:
        raise ValueError(
            "TaskMix needs width and n_layers >= 1 (or null: taken from the elmo component), "
            f"0 <= dropout < 1 and l2 >= 0; got width={width}, n_layers={n_layers}, dropout={dropout}, l2={l2}."
        )


def task_mixes(model: Model) -> List[Model]:
    """The TaskMix layers inside ``model``."""
    return [node for node in model.walk() if node.name == "elmo_task_mix"]


def set_layer_dims(model: Model, n_layers: int, width: int, source: str) -> None:
    """Give a TaskMix the shape of the layers it reads, (n_layers, n, width), as ``source`` (named
    in the error) gives them: unset dims are set, set ones must agree."""
    for dim, setting, value in (("nL", "n_layers", n_layers), ("nO", "width", width)):
        configured = model.maybe_get_dim(dim)
        if configured is None:
            model.set_dim(dim, value)
        elif configured != value:
            raise ValueError(
                f"The task mix has {setting}={configured} in its config, but {source} gives layers of shape "
                f"(L+1={n_layers}, n, 2P={width}): leave width and n_layers out of the mix's config (null) to "
                f"take them from the elmo component, or set {setting} = {value}."
            )


def _mix_init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[List[Floats2d]] = None) -> None:
    """Dims from the first doc of X that carries layers; s (L+1,) at 0 (the plain average) and
    gamma at 1 once the number of layers is known, else on the first forward pass with layers."""
    if X is not None:
        annotated = [doc._.elmo_data for doc in X if doc._.elmo_data is not None]
        if annotated:
            set_layer_dims(model, annotated[0].shape[0], annotated[0].shape[2], "the initialization docs' elmo_data")
        # spaCy's sample, before the elmo component ran on it: these docs get zeros (see _missing_layers)
        model.attrs["sample_ids"] = frozenset(id(doc) for doc in X if doc._.elmo_data is None)
    if model.has_dim("nL"):
        _reset_params(model)


def _reset_params(model: Model) -> None:
    model.set_param("s", model.ops.alloc1f(model.get_dim("nL")))
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def mix_weights(model: Model) -> Tuple[np.ndarray, float]:
    """The learned mix: (softmax(s) as numpy (L+1,), gamma)."""
    s = model.ops.to_numpy(model.get_param("s"))
    weights = np.exp(s - s.max())
    return weights / weights.sum(), float(model.ops.to_numpy(model.get_param("gamma"))[0])


def _mix_forward(
    model: Model, docs: List[Doc], is_train: bool
) -> Tuple[List[Floats2d], Callable[[List[Floats2d]], List[Doc]]]:
    if not docs:
        return [], lambda d_outputs: []
    ops = model.ops
    layers = _batch_layers(model, docs)  # first: it may fill in the dims and allocate s and gamma
    s, gamma = model.get_param("s"), model.get_param("gamma")
    weights = ops.softmax(s)
    averaged = [ops.xp.tensordot(weights, h, axes=1) for h in layers]  # (n, width) before gamma
    rate = model.attrs["dropout"] if is_train else 0.0
    masks = [ops.get_dropout_mask(a.shape, rate) if rate else None for a in averaged]
    outputs = [gamma[0] * a * (m if m is not None else 1.0) for a, m in zip(averaged, masks, strict=True)]

    def backprop(d_outputs: List[Floats2d]) -> List[Doc]:
        d_weights = ops.alloc1f(weights.shape[0])
        d_gamma = 0.0
        for h, a, m, d_y in zip(layers, averaged, masks, d_outputs, strict=True):
            d_y = d_y * m if m is not None else d_y
            d_gamma += float((a * d_y).sum())
            # thinc's Floats2d stub takes no None (new axis) index, as numpy and cupy do
            d_weights += gamma[0] * (h * d_y[None]).sum(axis=(1, 2))  # type: ignore[call-overload]
        n_tokens = sum(len(doc) for doc in docs)  # spaCy's task losses sum over tokens: so does the penalty
        # thinc's stubs make keepdims a required argument of a floats array's sum(); numpy's defaults to False
        d_s = weights * (d_weights - (weights * d_weights).sum()) + 2 * model.attrs["l2"] * n_tokens * s  # type: ignore[call-overload]
        model.inc_grad("s", d_s)
        model.inc_grad("gamma", ops.asarray1f([d_gamma]))
        return []

    return outputs, backprop


def _batch_layers(model: Model, docs: List[Doc]) -> List[Floats3d]:
    """Each doc's layers (L+1, n, 2P) on the model's device."""
    layers = [_layers(model, doc) for doc in docs]
    if any(doc._.elmo_data is not None for doc in docs):
        model.attrs["sample_ids"] = frozenset()  # past initialization: a freed sample's id may be reused
    return layers


def _layers(model: Model, doc: Doc) -> Floats3d:
    data = doc._.elmo_data
    if data is None:
        return _missing_layers(model, doc)
    set_layer_dims(model, data.shape[0], data.shape[2], "a doc's elmo_data")
    if not model.has_param("s"):
        _reset_params(model)
    layers = model.ops.asarray3f(data)
    if model.attrs["layer_norm"]:
        # thinc's Floats3d stub lacks mean() and std(), which numpy and cupy arrays have
        layers = (layers - layers.mean(axis=2, keepdims=True)) / (layers.std(axis=2, keepdims=True) + 1e-6)  # type: ignore[attr-defined]
    return layers


def _missing_layers(model: Model, doc: Doc) -> Floats3d:
    """Zeros for a doc of spaCy's initialization sample; any other doc without layers is an error."""
    if id(doc) not in model.attrs["sample_ids"]:
        if store_of(doc) is not None:
            stored_layers(doc)  # raises: the elmo component keeps only mixed vectors; says which setting to change
        raise ValueError(
            "A doc reached the task's ELMo mix without ELMo layers: the 'elmo' component must run before "
            "this component (in training, list it in [training] frozen_components and annotating_components)."
        )
    if not (model.has_dim("nL") and model.has_dim("nO")):
        raise ValueError(
            "The task mix cannot tell the biLM's width and number of layers at initialization: no elmo "
            "component earlier in the pipeline filled them in, and the docs it was given carry no layers "
            "(doc._.elmo_data). Add the 'elmo' component before this one, initialize with docs the elmo "
            "component has run on, or set width and n_layers in the mix's config."
        )
    return model.ops.alloc3f(model.get_dim("nL"), len(doc), model.get_dim("nO"))


@registry.architectures("spacy-elmo.ElmoEmbed.v1")
def ElmoEmbed(
    embed: Model[List[Doc], List[Floats2d]], mix: Model[List[Doc], List[Floats2d]], width: int
) -> Model[List[Doc], List[Floats2d]]:
    """[x_k; ELMo_k^task] projected to ``width`` (the encoder's width): ``embed`` is the task's own
    context-independent embedding, ``mix`` a TaskMix. Without the mix's width yet, the projection's
    input width is inferred at initialization."""
    mix_width = mix.maybe_get_dim("nO")
    n_inputs = output_width(embed) + mix_width if mix_width is not None else None
    model: Model[List[Doc], List[Floats2d]] = chain(
        concatenate(embed, mix), with_array(Maxout(width, n_inputs, nP=3, normalize=True))
    )
    model.set_dim("nO", width)
    model.name = "elmo_embed"
    return model


@registry.architectures("spacy-elmo.ElmoTok2Vec.v1")
def ElmoTok2Vec(
    tok2vec: Model[List[Doc], List[Floats2d]], mix: Model[List[Doc], List[Floats2d]]
) -> Model[List[Doc], List[Floats2d]]:
    """The task encoder's output with ELMo added again, [h_k; ELMo_k^task] (the paper's option of
    using ELMo at the output of the task RNN). Width: tok2vec's + the mix's (set at initialization
    when the mix's is not known yet)."""
    model: Model[List[Doc], List[Floats2d]] = concatenate(tok2vec, mix)
    if mix.has_dim("nO"):
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
