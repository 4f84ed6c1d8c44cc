#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_mp_share: torch.multiprocessing (spawn) shares CUDA tensors.

The producer (this process, cuda:0) fills three tensors: 256 MiB of
float32 (large pool), 1000 int64 (small pool: a sub-block of a segment)
and an int32 view at storage offset 12345 into a 16 MiB tensor, and sends
them over a spawn-context Pipe (pickling runs in this thread, so a refusal
to share is raised here, not in a feeder thread). The consumer checks
every element on the tensors' device, the float tensor's sum and the
view's offset, copies the float tensor to cuda:1 when there is one, and
adds 1 to the int64 tensor in place; the producer then checks it sees that
write through its own memory.

Output: "INFO ..." lines, "RESULT ..." lines (deterministic: the caller
compares them between a native run and a run under ipcbyval), a "TIME ..."
line, then "OK torch_mp_share" (exit 0) or "ERROR ..." (exit 1). Run it
with and without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
"""
import os
import sys
import time

N1 = 64 << 20  # float32 elements: 256 MiB
N2 = 1000
BIG, OFF, N3 = 4 << 20, 12345, 100000
SUM1 = (N1 // 65536) * (65535 * 65536 // 2)  # sum of i % 65536 over N1


def expected(torch, dev):
    """The three tensors' contents, computed on dev."""
    e1 = (torch.arange(N1, device=dev, dtype=torch.int64) % 65536).to(torch.float32)
    e2 = torch.arange(N2, device=dev, dtype=torch.int64) * 3
    e3 = torch.arange(OFF, OFF + N3, device=dev, dtype=torch.int32)
    return e1, e2, e3


def consumer(conn):
    """Receives the shared tensors, checks them, writes into one."""
    import torch

    out = {}
    try:
        d = conn.recv()
        t1, t2, t3 = d["t1"], d["t2"], d["t3"]
        e1, e2, e3 = expected(torch, t1.device)
        out["device"] = str(t1.device)
        out["t1_equal"] = bool(torch.equal(t1, e1))
        out["t1_sum"] = int(t1.double().sum().item())
        out["t2_equal"] = bool(torch.equal(t2, e2))
        out["t3_equal"] = bool(torch.equal(t3, e3))
        out["t3_offset"] = int(t3.storage_offset())
        if torch.cuda.device_count() >= 2:
            peer = t1.to("cuda:1")
            out["t1_peer"] = bool(torch.equal(peer, e1.to("cuda:1")))
            del peer
        else:
            out["t1_peer"] = "n/a"
        t2.add_(1)
        torch.cuda.synchronize(t2.device)
        del t1, t2, t3, d, e1, e2, e3
        out["ok"] = True
    except Exception as e:  # reported by the producer
        out["error"] = f"{type(e).__name__}: {e}"
    conn.send(out)
    conn.close()


def main():
    try:
        import torch
        import torch.multiprocessing as mp
    except Exception as e:
        print(f"SKIP torch import failed: {type(e).__name__}: {e}")
        return 77
    if not torch.cuda.is_available():
        print("SKIP torch sees no CUDA device")
        return 77
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or "(default)"
    print(f"INFO torch {torch.__version__} cuda {torch.version.cuda} "
          f"gpus {torch.cuda.device_count()} PYTORCH_CUDA_ALLOC_CONF={conf}")
    dev = torch.device("cuda", 0)
    e1, e2, e3 = expected(torch, dev)
    t1, t2 = e1.clone(), e2.clone()
    big = torch.arange(BIG, device=dev, dtype=torch.int32)
    t3 = big[OFF:OFF + N3]
    torch.cuda.synchronize()

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=consumer, args=(child,))
    proc.start()
    child.close()
    t0 = time.perf_counter()
    try:
        parent.send({"t1": t1, "t2": t2, "t3": t3})
    except Exception as e:
        print(f"ERROR the producer could not share: {type(e).__name__}: {e}")
        parent.close()
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
        return 1
    if not parent.poll(100):
        print("ERROR no answer from the consumer in 100 s")
        proc.terminate()
        return 1
    res = parent.recv()
    share_ms = (time.perf_counter() - t0) * 1e3
    proc.join(60)
    if "error" in res:
        print(f"ERROR consumer: {res['error']}")
        return 1
    writeback = bool(torch.equal(t2, e2 + 1))
    print(f"RESULT consumer device {res['device']}")
    print(f"RESULT t1 256MiB float32 equal={res['t1_equal']} "
          f"sum={res['t1_sum']} expected={SUM1}")
    print(f"RESULT t2 int64x{N2} equal={res['t2_equal']} writeback_seen={writeback}")
    print(f"RESULT t3 int32 view equal={res['t3_equal']} offset={res['t3_offset']}")
    print(f"RESULT t1 copied to cuda:1 equal={res['t1_peer']}")
    print(f"TIME share_ms={share_ms:.1f} (send to the consumer's answer, "
          f"its CUDA init included)")
    ok = (res["t1_equal"] and res["t1_sum"] == SUM1 and res["t2_equal"] and writeback
          and res["t3_equal"] and res["t3_offset"] == OFF and res["t1_peer"] in (True, "n/a")
          and proc.exitcode == 0)
    if not ok:
        print(f"ERROR wrong results (consumer exit code {proc.exitcode})")
        return 1
    print("OK torch_mp_share")
    return 0


if __name__ == "__main__":
    sys.exit(main())
