"""A deliberately plain NumPy biLM: one sentence at a time, every token over the full 50
characters, the LSTM one step at a time in float64. An independent check on the fast paths."""

import numpy as np

from spacy_elmo.network.chars import BOS_TOKEN, EOS_TOKEN, encode_tokens


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class ReferenceBiLM:
    def __init__(self, bilm):
        self.config = bilm.config
        self.p = {name: t.detach().double().numpy() for name, t in bilm.state_dict().items()}

    def token_representation(self, char_ids):
        """char_ids (C,) -> (P,)"""
        p, config = self.p, self.config
        chars = p["char_encoder.embedding.weight"][char_ids]  # (C, E)
        features = []
        for index, (width, _) in enumerate(config.filters):
            weight = p[f"char_encoder.convs.{index}.weight"]  # (F, E, w)
            scores = [
                np.einsum("few,we->f", weight, chars[start : start + width]) + p[f"char_encoder.convs.{index}.bias"]
                for start in range(len(char_ids) - width + 1)
            ]
            best = np.max(scores, axis=0)
            features.append(np.maximum(best, 0) if config.activation == "relu" else np.tanh(best))
        x = np.concatenate(features)
        for k in range(config.n_highway):
            name = f"char_encoder.highways.{k}"
            gate = _sigmoid(p[f"{name}.gate.weight"] @ x + p[f"{name}.gate.bias"])
            transform = np.maximum(p[f"{name}.transform.weight"] @ x + p[f"{name}.transform.bias"], 0)
            x = gate * transform + (1 - gate) * x
        return p["char_encoder.projection.weight"] @ x + p["char_encoder.projection.bias"]

    def _lstm(self, name, inputs, h, c):
        p, config = self.p, self.config
        w_ih, w_hh, b, w_hr = (p[f"{name}.{k}"] for k in ("weight_ih", "weight_hh", "bias", "weight_hr"))
        outputs = []
        for x in inputs:
            i, f, g, o = np.split(w_ih @ x + w_hh @ h + b, 4)
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            if config.cell_clip is not None:
                c = np.clip(c, -config.cell_clip, config.cell_clip)
            h = w_hr @ (_sigmoid(o) * np.tanh(c))
            if config.proj_clip is not None:
                h = np.clip(h, -config.proj_clip, config.proj_clip)
            outputs.append(h)
        return np.array(outputs), h, c

    def embed(self, tokens, state=None):
        """tokens: a sentence without boundaries -> layers (L+1, T, 2P), state after it."""
        config = self.config
        ids = encode_tokens([BOS_TOKEN, *tokens, EOS_TOKEN])
        x = np.array([self.token_representation(row) for row in ids])
        zeros = (np.zeros(config.projection_dim), np.zeros(config.lstm_dim))
        state = state or {
            key: zeros
            for key in [(d, k) for d in ("forward_layers", "backward_layers") for k in range(config.n_layers)]
        }
        new_state, layers = {}, [np.concatenate([x, x], axis=1)]
        per_direction = {}
        for direction, flip in (("forward_layers", False), ("backward_layers", True)):
            inputs = x[::-1] if flip else x
            outs = []
            for k in range(config.n_layers):
                out, h, c = self._lstm(f"{direction}.{k}", inputs, *state[direction, k])
                new_state[direction, k] = (h, c)
                if config.residual and k > 0:
                    out = out + inputs
                outs.append(out[::-1] if flip else out)
                inputs = out
            per_direction[direction] = outs
        for k in range(config.n_layers):
            layers.append(
                np.concatenate([per_direction["forward_layers"][k], per_direction["backward_layers"][k]], axis=1)
            )
        return np.stack(layers)[:, 1:-1], new_state
