"""When a call replays a CUDA graph, and which graphs a model keeps (``kernels.gpu_stacks``), with
the capture stood in for: on the CPU, no CUDA needed. That replays give the kernels' bits is
tests/test_gpu.py's (on a GPU)."""

from types import SimpleNamespace

import torch
from promises import promised

from spacy_elmo.kernels.gpu_stacks import MOST_GRAPH_BYTES, CallGraphs, Captured, Stacks
from spacy_elmo.kernels.onednn import bucket_rows

OPS = SimpleNamespace(precision="fp32")
STACKS = Stacks(pairs=(), clips=(None, None), residual=True)
WIDTH = 4


class CountedGraph:
    def __init__(self) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1


def counted_captures(graphs: CallGraphs) -> list:
    """Make ``graphs`` capture stand-ins (a graph that counts its replays, layers of zeros); the
    capture's own run answers with ones. Returns the list of captures made."""
    made = []

    def capture(ops, stacks, tokens, rows, schedule):
        layers = torch.zeros(3, rows, 2 * WIDTH)
        captured = Captured(CountedGraph(), tokens.new_zeros(rows, WIDTH), schedule.host.clone(), layers, stacks)
        made.append(captured)
        return captured, torch.ones(3, tokens.shape[0], 2 * WIDTH)

    graphs._capture = capture
    return made


def call(graphs: CallGraphs, lengths: list, stacks: Stacks = STACKS):
    tokens = torch.randn(sum(lengths), WIDTH)
    return graphs.run(OPS, stacks, tokens, lengths)


def test_a_bucket_is_launched_first_captured_second_and_replayed_after():
    graphs = CallGraphs()
    made = counted_captures(graphs)
    assert call(graphs, [30, 20]) is None and len(graphs) == 0, "the first call of a bucket launches its kernels"
    answer = call(graphs, [30, 20])
    assert len(made) == 1 and torch.equal(answer, torch.ones(3, 50, 2 * WIDTH)), "the capture's own run answers"
    replayed = call(graphs, [29, 21])  # the same bucket: 50 tokens, the same steps and lanes
    assert len(made) == 1 and made[0].graph.replays == 1
    assert replayed.shape == (3, 50, 2 * WIDTH) and graphs.sizes() == [bucket_rows(50)]


def test_calls_of_thousands_of_tokens_replay_graphs_too():
    graphs = CallGraphs()
    counted_captures(graphs)
    lengths = [27] * 150  # 4,050 tokens, as a call under the default budget
    for _ in range(3):
        call(graphs, lengths)
    assert graphs.sizes() == [bucket_rows(4050)]


def test_the_graphs_memory_is_bounded_the_least_recently_used_dropped_first():
    graphs = CallGraphs(most_bytes=20_000)
    counted_captures(graphs)
    for length in (40, 60, 80, 60):  # buckets of 40, 64 and 80 rows, each called twice; 60 again last
        call(graphs, [length])
        call(graphs, [length])
    # each keeps 132 bytes a row (tokens 16, tables 20, layers 96): 40 + 64 + 80 rows would be 24,288
    assert graphs.sizes() == [80, 64] and graphs.nbytes == 132 * (80 + 64)


def test_a_models_graphs_keep_at_most_the_documented_memory():
    """docs/component.md: the graphs keep at most graph-bytes (docs/promises.md); the bound itself is
    held by the test above on a small budget."""
    assert MOST_GRAPH_BYTES == promised("graph-bytes") and CallGraphs().most_bytes == MOST_GRAPH_BYTES


def test_a_shape_met_once_long_ago_is_forgotten():
    from spacy_elmo.kernels import gpu_stacks

    graphs = CallGraphs()
    made = counted_captures(graphs)
    call(graphs, [5])
    for clip in range(1, gpu_stacks.SIGHTINGS + 1):  # as many other buckets, each met once
        call(graphs, [5], Stacks(pairs=(), clips=(float(clip), None), residual=True))
    assert call(graphs, [5]) is None and made == [], "met once again, not twice"
    assert call(graphs, [5]) is not None and len(made) == 1
