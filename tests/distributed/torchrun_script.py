"""Run under torchrun: ring all_reduce on the env:// process group vs dist.all_reduce; after
destroy_process_group no thread but the main one may be left (gloo's threads outliving their
group race the interpreter's exit: one releasing a tensor after finalization began aborts the
process, "terminate called without an active exception")."""

import os
import sys

import torch
import torch.distributed as dist

import ringccl.torch as rt

dist.init_process_group("gloo")  # env:// from torchrun
rank, world_size = dist.get_rank(), dist.get_world_size()
x = torch.randint(-8, 8, (100_003,), generator=torch.Generator().manual_seed(rank)).float()
ours, ref = x.clone(), x.clone()
rt.all_reduce(ours)
dist.all_reduce(ref)
out = torch.empty(world_size * 10)
rt.all_gather_into_tensor(out, torch.full((10,), float(rank)))
ok = torch.equal(ours, ref) and torch.equal(out, torch.arange(world_size).repeat_interleave(10).float())
dist.destroy_process_group()
tasks = f"/proc/{os.getpid()}/task"
left = sorted(open(f"{tasks}/{t}/comm").read().strip() for t in os.listdir(tasks)
              if int(t) != os.getpid()) if os.path.isdir(tasks) else []
print(f"rank {rank}/{world_size}: {'OK' if ok else 'MISMATCH'}"
      + (f"; threads left after destroy_process_group: {left}" if left else ""))
sys.exit(0 if ok and not left else 1)
