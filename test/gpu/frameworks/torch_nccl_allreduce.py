#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_nccl_allreduce: torch.distributed NCCL all-reduce across the GPUs.

One rank per GPU. Under torchrun (RANK/WORLD_SIZE/LOCAL_RANK set) the
process group comes from the environment; run directly, this script starts
--world ranks itself with torch.multiprocessing.spawn and
init_method tcp://127.0.0.1:<free port>.

Each rank fills --mib MiB of float32 with ((i % 1024) + 1) * (rank + 1);
after one all-reduce (sum) every element must be
((i % 1024) + 1) * world * (world + 1) / 2 on every rank (exact in
float32). Timing: 5 warm-up all-reduces of a zeroed buffer, then --batches
batches of 10 back-to-back all-reduces timed with CUDA events on rank 0;
the per-all-reduce time of each batch gives median and quartiles.

NCCL_CUMEM_ENABLE=0 makes NCCL share its buffers with legacy cudaIpc
handles, =1 with cuMem POSIX fds over its own socket: the caller runs both,
with and without ipcbyval. Rank 0 prints "INFO ...", "RESULT ..."
(deterministic, compared between runs), "TIME allreduce_ms median=M p25=A
p75=B busbw_GBps=G", then "OK torch_nccl_allreduce" (exit 0) or
"ERROR ..." (exit 1).
"""
import argparse
import os
import socket
import sys


def worker(rank, world, local_rank, port, args):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    if port:
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world)
    else:
        dist.init_process_group("nccl")
    n = args.mib << 18  # float32 elements
    base = (torch.arange(n, device=dev, dtype=torch.int64) % 1024 + 1).to(torch.float32)
    x = base * (rank + 1)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    good = torch.equal(x, base * (world * (world + 1) // 2))
    flag = torch.tensor([1 if good else 0], device=dev, dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    del x, base

    buf = torch.zeros(n, device=dev, dtype=torch.float32)
    for _ in range(5):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    per_op = []
    for _ in range(args.batches):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            dist.all_reduce(buf)
        end.record()
        end.synchronize()
        per_op.append(start.elapsed_time(end) / 10)
    ok = int(flag.item()) == 1
    if rank == 0:
        per_op.sort()
        q = lambda f: per_op[min(len(per_op) - 1, int(f * (len(per_op) - 1) + 0.5))]
        med = q(0.5)
        nbytes = n * 4
        busbw = nbytes / (med * 1e-3) / 1e9 * (2 * (world - 1) / world) if world > 1 else 0.0
        nccl = torch.cuda.nccl.version()
        nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        print(f"INFO torch {torch.__version__} nccl {nccl} world {world} "
              f"NCCL_CUMEM_ENABLE={os.environ.get('NCCL_CUMEM_ENABLE', '(unset)')} "
              f"launcher {'torchrun' if not port else 'mp.spawn'}")
        print(f"RESULT allreduce sum world={world} mib={args.mib} "
              f"check={'ok' if ok else 'WRONG'}")
        print(f"TIME allreduce_ms median={med:.4f} p25={q(0.25):.4f} p75={q(0.75):.4f} "
              f"busbw_GBps={busbw:.1f}")
        print("OK torch_nccl_allreduce" if ok else "ERROR all-reduce result wrong on a rank")
    dist.destroy_process_group()
    if not ok:
        sys.exit(1)


def spawned(index, world, port, args):
    worker(index, world, index, port, args)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=0, help="ranks (default: one per GPU)")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--batches", type=int, default=9)
    args = ap.parse_args()
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except Exception as e:
        print(f"SKIP torch import failed: {type(e).__name__}: {e}")
        return 77
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        print("SKIP no CUDA device or no NCCL in this torch")
        return 77
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
               int(os.environ.get("LOCAL_RANK", os.environ["RANK"])), 0, args)
        return 0
    world = args.world or torch.cuda.device_count()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(spawned, args=(world, port, args), nprocs=world, join=True)
    except Exception as e:
        print(f"ERROR a rank failed: {type(e).__name__}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
