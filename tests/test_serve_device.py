"""`serve --device cuda`: one CUDA GPU per Ray Serve replica, asked of Ray in the replica's actor
options, the pipeline put on it with ``spacy.require_gpu`` and torch's allocator; refused with a
message that says what to do, before Ray starts, where this machine has too few GPUs. Checked on
the CPU: nothing here needs a GPU, and nothing starts Ray."""

import pytest
from typer.testing import CliRunner

pytest.importorskip("ray.serve", reason="the ray extra (pip install spacy-elmo[ray]) is not installed")

import ray  # noqa: E402

from spacy_elmo.cli import app  # noqa: E402
from spacy_elmo.serving import embedder, ray_engine, service  # noqa: E402
from spacy_elmo.serving import settings as serve_settings
from spacy_elmo.serving.settings import ServeSettings  # noqa: E402


@pytest.fixture
def no_ray(monkeypatch):
    """Ray refuses to start: a test that got as far fails."""

    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "init", refuse)


def gpus_here(monkeypatch, count: int) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def serve_output(*arguments: str) -> tuple:
    result = CliRunner().invoke(app, ["serve", *arguments])
    return result.exit_code, " ".join(result.output.split())


def test_cuda_without_a_gpu_is_refused_before_ray_starts(monkeypatch, no_ray, tiny_weights):
    gpus_here(monkeypatch, 0)
    code, output = serve_output(str(tiny_weights), "--device", "cuda", "--port", "1")
    assert code == 1, output
    assert "torch.cuda.is_available() is False" in output and "sees 0 on this machine" in output
    assert "a torch built with CUDA" in output and "--device cpu" in output


def test_more_replicas_than_gpus_is_refused_with_the_count_that_fits(monkeypatch, no_ray, tiny_weights):
    gpus_here(monkeypatch, 1)
    code, output = serve_output(str(tiny_weights), "--device", "cuda", "--replicas", "3", "--port", "1")
    assert code == 1 and "--replicas 3 needs 3 CUDA GPU(s)" in output and "give --replicas 1" in output, output


def test_an_unknown_device_is_refused(no_ray, tiny_weights):
    code, output = serve_output(str(tiny_weights), "--device", "gpu", "--port", "1")
    assert code == 1 and "device must be one of ('cpu', 'cuda'), got 'gpu'" in output, output
    with pytest.raises(ValueError, match="--device cpu, or --device cuda"):
        ServeSettings(source="original", device="cuda:0")


@pytest.mark.parametrize("device, gpus", [("cpu", None), ("cuda", 1)])
def test_the_device_becomes_each_replicas_actor_options(device, gpus):
    made = ray_engine.embedder_deployment(ServeSettings(source="original", device=device, replicas=2, threads=3))
    assert made.num_replicas == 2
    assert made.ray_actor_options.get("num_gpus") == gpus and made.ray_actor_options["num_cpus"] == 0
    assert not ray.is_initialized()


def test_a_replica_loads_on_its_gpu_with_torchs_allocator(monkeypatch, tiny_weights):
    from spacy_elmo.corpus import worker

    calls = []
    monkeypatch.setattr(worker, "load_pipeline", lambda settings, gpu_id, allocator: calls.append((gpu_id, allocator)))
    embedder.load_served_pipeline(ServeSettings(source=str(tiny_weights), device="cuda", threads=1))
    embedder.load_served_pipeline(ServeSettings(source=str(tiny_weights), device="cpu", threads=1))
    assert calls == [(0, "pytorch"), (-1, "pytorch")]  # -1: the CPU, where no allocator is set


def test_the_gpu_is_taken_then_torchs_allocator_set(monkeypatch):
    import spacy
    import thinc.api

    from spacy_elmo.corpus import gpus

    calls = []
    monkeypatch.setattr(gpus, "check_gpu", lambda gpu_id: None)
    monkeypatch.setattr(spacy, "require_gpu", lambda gpu_id: calls.append(("require_gpu", gpu_id)))
    monkeypatch.setattr(thinc.api, "set_gpu_allocator", lambda name: calls.append(("allocator", name)))
    gpus.use_gpu(0, "pytorch")
    gpus.use_gpu(-1, "pytorch")
    gpus.use_gpu(0)
    assert calls == [("require_gpu", 0), ("allocator", "pytorch"), ("require_gpu", 0)]


def test_a_replica_without_a_gpu_says_so(monkeypatch, tiny_weights):
    gpus_here(monkeypatch, 0)
    with pytest.raises(ValueError, match=r"gpu_id 0: no such CUDA GPU \(torch sees 0 CUDA GPU\(s\)\)"):
        embedder.load_served_pipeline(ServeSettings(source=str(tiny_weights), device="cuda", threads=1))


class Cluster:
    """What ``start`` asks of Ray, for a cluster of ``resources``."""

    def __init__(self, resources: dict) -> None:
        self.resources = resources

    def cluster_resources(self) -> dict:
        return self.resources


def test_a_cluster_with_too_few_gpus_is_refused():
    settings = ServeSettings(source="original", device="cuda", replicas=2, threads=1)
    with pytest.raises(ValueError, match="the Ray cluster has 0. Add GPU nodes to the cluster, or serve on the CPU"):
        serve_settings.check_gpus_of_cluster(Cluster({"CPU": 64.0}), settings)
    with pytest.raises(ValueError, match="has 1. Add GPU nodes to the cluster, give --replicas 1, or"):
        serve_settings.check_gpus_of_cluster(Cluster({"CPU": 64.0, "GPU": 1.0}), settings)
    serve_settings.check_gpus_of_cluster(Cluster({"GPU": 2.0}), settings)
    serve_settings.check_gpus_of_cluster(Cluster({}), ServeSettings(source="original", replicas=2, threads=1))


def test_joining_a_cluster_without_gpus_stops_before_serving(monkeypatch):
    from ray import serve

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(("init", kwargs["address"])))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0})
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(("shutdown",)))
    monkeypatch.setattr(serve, "start", lambda **kwargs: calls.append(("serve",)))
    settings = ServeSettings(source="original", device="cuda", threads=1, ray_address="ray://head:10001")
    assert settings.runs_on_ray
    with pytest.raises(ValueError, match="the Ray cluster has 0"):
        service.run(settings, on_ready=lambda url: calls.append(("ready",)), on_drain=lambda left: None)
    assert calls == [("init", "ray://head:10001"), ("shutdown",)]
