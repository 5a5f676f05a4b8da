"""The elmo component's listeners: the task mixes (``spacy-elmo.TaskMix.v1``) in the models of the
components after it, which read its layers and so take their width (2P) and number of layers
(L+1) from its biLM.

spaCy links a component to the models of the later components of its pipeline through
``find_listeners`` (its ``ListenedToComponent`` protocol, the one ``tok2vec`` implements): on
``add_pipe``, after loading a pipeline, and in ``spacy train`` before initialization. There the
elmo component fills in the dims a mix's config leaves out and checks those it gives, so that
they are known when the later components are initialized. A component without weights yet (a fresh
one, before ``nlp.initialize``) does the same from its ``initialize``, which loads them and runs
before the later components'. Listing the mixes also lets ``spacy train`` warn when the elmo
component is frozen but not in ``annotating_components``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from spacy.language import Language
from thinc.api import Model

from .task_mix import set_layer_dims, task_mixes


class MixListeners:
    """Mixin for the elmo component; it provides ``name`` and ``layer_dims``, and sets
    ``listener_map = {}`` in its ``__init__``."""

    name: str
    listener_map: Dict[str, List[Model]]

    def layer_dims(self) -> Optional[Tuple[int, int]]:
        """(L+1, 2P) of the layers the component gives; None before it has weights."""
        raise NotImplementedError

    @property
    def listening_components(self) -> List[str]:
        """The later components whose models hold a task mix."""
        return list(self.listener_map)

    @property
    def listeners(self) -> List[Model]:
        """Their task mixes."""
        return [mix for name in self.listening_components for mix in self.listener_map[name]]

    def add_listener(self, listener: Model, component_name: str) -> None:
        mixes = self.listener_map.setdefault(component_name, [])
        if listener not in mixes:
            mixes.append(listener)

    def remove_listener(self, listener: Model, component_name: str) -> bool:
        mixes = self.listener_map.get(component_name, [])
        if listener not in mixes:
            return False
        mixes.remove(listener)
        if not mixes:
            del self.listener_map[component_name]
        return True

    def find_listeners(self, component: Any) -> None:
        """List the task mixes in ``component``'s model and give them this biLM's dims."""
        model = getattr(component, "model", None)
        if not isinstance(model, Model):
            return
        dims = self.layer_dims()
        for mix in task_mixes(model):
            self.add_listener(mix, component.name)
            if dims is not None:
                set_layer_dims(mix, *dims, source=f"the '{self.name}' component before '{component.name}'")

    def find_later_listeners(self, nlp: Language) -> None:
        """``find_listeners`` on the components after this one in ``nlp``'s pipeline."""
        components: List[object] = [component for _, component in nlp.pipeline]
        position = next((i for i, component in enumerate(components) if component is self), None)
        if position is not None:
            for component in components[position + 1 :]:
                self.find_listeners(component)
