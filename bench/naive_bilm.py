"""A straightforward biLM forward pass, the way ports are commonly written (the widely used
PyTorch port works this way): the char CNN over all 50 characters of every position of the padded
batch, padding positions included, then each direction's LSTM one step at a time over the padded
batch in row layout (h @ W.T). Same parameters and results as spacy_elmo's BiLM; the baseline
the benchmark measures against."""

import torch
import torch.nn.functional as F


@torch.inference_mode()
def naive_token_representations(bilm, char_ids):
    """char_ids (B, T, 50) -> (B, T, P), every position of the padded batch over all 50 chars."""
    encoder, config = bilm.char_encoder, bilm.config
    batch, steps, n_chars = char_ids.shape
    chars = encoder.embedding(char_ids.reshape(batch * steps, n_chars)).transpose(1, 2)
    activation = torch.relu if config.activation == "relu" else torch.tanh
    x = torch.cat([activation(conv(chars).amax(dim=2)) for conv in encoder.convs], dim=1)
    for highway in encoder.highways:
        x = highway(x)
    return encoder.projection(x).view(batch, steps, -1)


@torch.inference_mode()
def naive_forward(bilm, char_ids):
    """char_ids (B, T, 50) -> layers (L+1, B, T, 2P)."""
    config = bilm.config
    steps = char_ids.shape[1]
    tokens = naive_token_representations(bilm, char_ids)
    lengths = char_ids.gt(0).any(dim=-1).sum(dim=1)
    reverse = _reverse_index(lengths, steps)
    directions = []
    for stack, flip in ((bilm.forward_layers, False), (bilm.backward_layers, True)):
        inputs = _gather_time(tokens, reverse) if flip else tokens
        outputs = []
        for depth, layer in enumerate(stack):
            out = _lstm(layer, inputs)
            if config.residual and depth > 0:
                out = out + inputs
            outputs.append(_gather_time(out, reverse) if flip else out)
            inputs = out
        directions.append(outputs)
    layers = [torch.cat([tokens, tokens], dim=-1)]
    layers += [torch.cat([f, b], dim=-1) for f, b in zip(*directions)]
    mask = char_ids.gt(0).any(dim=-1).unsqueeze(-1)
    return torch.stack(layers) * mask


def _lstm(layer, inputs):
    batch, steps, _ = inputs.shape
    h = inputs.new_zeros(batch, layer.projection_dim)
    c = inputs.new_zeros(batch, layer.cells)
    outputs = []
    for t in range(steps):
        gates = F.linear(inputs[:, t], layer.weight_ih, layer.bias) + F.linear(h, layer.weight_hh)
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        if layer.cell_clip is not None:
            c = c.clamp(-layer.cell_clip, layer.cell_clip)
        h = F.linear(torch.sigmoid(o) * torch.tanh(c), layer.weight_hr)
        if layer.proj_clip is not None:
            h = h.clamp(-layer.proj_clip, layer.proj_clip)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def _reverse_index(lengths, steps):
    positions = torch.arange(steps).unsqueeze(0)
    flipped = lengths.unsqueeze(1) - 1 - positions
    return torch.where(flipped >= 0, flipped, positions)


def _gather_time(x, index):
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
