#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_vmm_import: PyTorch's own import of an expandable segment.

For each size given (MiB), a fresh consumer process (spawn) receives a
tensor of that size from this producer over a spawn-context Pipe
(torch.multiprocessing's CUDA sharing; run with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, the caller sets it) and
times, on its side, the unpickling that imports the memory (rebuild of the
storage: the segment's fds fetched with pidfd_getfd, imported and mapped)
up to a synchronised first read of the tensor. The first import of a
segment in that consumer, as vmm_cold times ipcbyval's first open.

Output: "torch_import_us MIB T" per size, then "OK torch_vmm_import";
"SKIP: torch_vmm_import: why" (exit 77) without torch or a GPU.
"""
import os
import sys
import time


def consumer(conn):
    import pickle

    import torch

    torch.cuda.init()
    data = conn.recv_bytes()  # the pickled tensor: not imported yet
    t0 = time.perf_counter()
    t = pickle.loads(data)
    t[-1:].sum().item()  # the memory is there and mapped
    torch.cuda.synchronize()
    conn.send(((time.perf_counter() - t0) * 1e6, t.numel()))
    conn.recv()  # hold it until the producer is done
    del t


def main():
    try:
        import torch
        import torch.multiprocessing as mp
        from torch.multiprocessing import reductions  # noqa: F401 (registers the reducers)
    except ImportError as e:
        print(f"SKIP: torch_vmm_import: PyTorch is not installed ({e})")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: torch_vmm_import: no CUDA device")
        return 77
    import io
    from multiprocessing.reduction import ForkingPickler

    ctx = mp.get_context("spawn")
    for mib in [int(a) for a in sys.argv[1:]] or [2]:
        t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
        t.fill_(7)
        torch.cuda.synchronize()
        buf = io.BytesIO()
        ForkingPickler(buf).dump(t)  # as mp.Queue/Pipe pickle it
        a, b = ctx.Pipe()
        p = ctx.Process(target=consumer, args=(b,))
        p.start()
        a.send_bytes(buf.getvalue())
        us, n = a.recv()
        a.send(0)
        p.join()
        if n != mib << 20 or p.exitcode != 0:
            print(f"ERROR torch_vmm_import: consumer failed for {mib} MiB")
            return 1
        print(f"torch_import_us {mib} {us:.1f}", flush=True)
        del t
        torch.cuda.empty_cache()
    print("OK torch_vmm_import")
    return 0


if __name__ == "__main__":
    sys.exit(main())
