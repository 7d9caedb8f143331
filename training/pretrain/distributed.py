"""Data-parallel helpers: the same command runs alone or under ``torchrun`` (DDP).

torchrun --nproc_per_node 2 -m training.cli pretrain ...   # gloo on CPU, nccl on GPU
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup(device: str) -> Dist:
    """Join the process group when torchrun set WORLD_SIZE > 1."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    d = Dist(
        dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))
    )
    if device.startswith("cuda"):
        torch.cuda.set_device(d.local_rank)
    return d


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


@torch.no_grad()
def replica_spread(tensors: Sequence[torch.Tensor]) -> float:
    """Max |theta_rank - theta_rank0| over all ranks and tensors (0.0 = in sync)."""
    if not dist.is_initialized():
        return 0.0
    flat = torch.cat([t.detach().float().flatten() for t in tensors])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    spread = (flat - ref).abs().max().reshape(1)
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    return float(spread.item())
