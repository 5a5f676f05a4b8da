"""The processes of a pretraining job: one per device, started by torchrun (or a single one), and
which data streams each reads. Under torchrun they form a process group (NCCL on GPUs, gloo on CPU)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, List

import torch
import torch.distributed as dist

from .train_config import TrainConfig


@dataclass
class Processes:
    """Where this process stands in the job: rank, world size, device, its data streams."""

    rank: int
    world: int
    device: torch.device
    streams: List[int]
    n_streams: int

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def setup(cls, cfg: TrainConfig) -> "Processes":
        """Pick this process's device (and CPU threads), join the process group, share out the streams."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
        cuda = _uses_cuda(cfg.device)
        device = torch.device(f"cuda:{local}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(
                cfg.threads or max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
            )
        if world > 1:
            dist.init_process_group("nccl" if cuda else "gloo")
        n_streams = cfg.data_streams or world
        if n_streams % world:
            raise ValueError(f"data_streams ({n_streams}) must be a multiple of the number of processes ({world}).")
        per_rank = n_streams // world
        return cls(rank, world, device, list(range(rank * per_rank, (rank + 1) * per_rank)), n_streams)

    def all_sum(self, values: List[float]) -> List[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.world > 1:
            dist.all_reduce(tensor)
        return tensor.tolist()

    def gather(self, value: Any) -> List[Any]:
        if self.world == 1:
            return [value]
        values: List[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values

    def close(self) -> None:
        """Wait for every process, then leave the process group."""
        if self.world > 1:
            dist.barrier()
            dist.destroy_process_group()


def _uses_cuda(setting: str) -> bool:
    """Whether this process trains on a GPU: the ``device`` setting, "auto" where torch sees CUDA."""
    if setting == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "device 'cuda' was asked for, but torch sees no CUDA GPU here; install a CUDA build of torch, or set "
            "device 'auto' or 'cpu'."
        )
    return setting == "cuda" or (setting == "auto" and torch.cuda.is_available())
