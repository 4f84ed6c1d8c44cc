#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_pool_bench: a 32 MiB tensor at the end of a PyTorch pool of 1, 16
and 64 GiB: ipcbyval's first open and cached re-open beside PyTorch's own
import of the same tensor.

    scripts/ipcbyval-run python3 -u test/gpu/frameworks/torch_pool_bench.py \\
        [--pools 1,16,64] [--reps 3] [--reopens 200] [--reimports 4]

This process (under ipcbyval; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
set when missing) allocates the pool's filler, then the tensor, exports it
with CuPy's cudaIpcGetMemHandle at its page base (vLLM's offset), and
times, in fresh consumer processes (spawn; CUDA up before the clock):
  ipcbyval  cudaIpcOpenMemHandle + a 4-byte read at the tensor's end (the
            first open: median of --reps consumers), then --reopens
            open+close cycles (the cached re-open: median); every element
            checked by a kernel;
  torch     the unpickling of the tensor (torch.multiprocessing's rebuild:
            cuMemExportToShareableHandle + pidfd_getfd) + a read of its last
            element, first, then --reimports times after dropping the
            previous one (median); ipcbyval not loaded in that consumer.
A pool skipped when the GPU lacks the memory says so.

Output: "pool GIB byval_first_us A byval_reopen_us B torch_first_us C
torch_reimport_us D export_us E pages N" per pool or "pool_skip GIB why",
then "OK torch_pool_bench" (exit 0); "ERROR ..." (exit 1) when data read
wrong or a consumer failed; "SKIP: torch_pool_bench: why" (exit 77)
without torch, CuPy or a GPU.
"""
import argparse
import ctypes
import os
import sys
import time

MIB = 1 << 20
GIB = 1 << 30
NBYTES = 32 * MIB
TAG = 5


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


def byval_consumer(conn, dev, reopens):
    import cupy as cp

    rt = cp.cuda.runtime
    out = {}
    try:
        cp.cuda.Device(dev).use()
        cp.zeros(1).sum().item()  # context and kernels up
        conn.send("ready")
        e = conn.recv()
        n = e["nbytes"] // 4
        last = ctypes.c_int32(-1)
        t0 = time.perf_counter()
        p = rt.ipcOpenMemHandle(e["h"])
        rt.memcpy(ctypes.addressof(last), p + e["off"] + e["nbytes"] - 4, 4, 2)
        out["first_us"] = (time.perf_counter() - t0) * 1e6
        mem = cp.cuda.UnownedMemory(p + e["off"], e["nbytes"], None, device_id=dev)
        got = cp.ndarray((n,), cp.int32, cp.cuda.MemoryPointer(mem, 0))
        want = cp.arange(n, dtype=cp.int32) * 7 + TAG
        out["ok"] = bool(cp.array_equal(got, want)) and last.value == (n - 1) * 7 + TAG
        del got
        rt.deviceSynchronize()
        rt.ipcCloseMemHandle(p)
        times = []
        for _ in range(reopens):
            t0 = time.perf_counter()
            q = rt.ipcOpenMemHandle(e["h"])
            rt.ipcCloseMemHandle(q)
            times.append((time.perf_counter() - t0) * 1e6)
        out["reopen_us"] = median(times)
    except Exception as ex:
        out["error"] = f"{type(ex).__name__}: {ex}"
    conn.send(out)


def torch_consumer(conn, dev):
    import gc
    import pickle

    import torch

    out = {}
    try:
        torch.cuda.set_device(dev)
        torch.zeros(1, device="cuda").sum().item()
        conn.send("ready")
        datas = conn.recv()
        times, ok = [], True
        for k, d in enumerate(datas):
            t0 = time.perf_counter()
            t = pickle.loads(d)
            v = int(t[-1].item())
            times.append((time.perf_counter() - t0) * 1e6)
            ok = ok and v == (t.numel() - 1) * 7 + TAG
            if k == 0:
                want = torch.arange(t.numel(), dtype=torch.int32, device=t.device) * 7 + TAG
                ok = ok and bool(torch.equal(t, want))
                del want
            del t
            gc.collect()
            torch.cuda.synchronize()
        out = {"first_us": times[0], "reimport_us": median(times[1:]), "ok": ok}
    except Exception as ex:
        out["error"] = f"{type(ex).__name__}: {ex}"
    conn.send(out)


def consume(ctx, target, args, payload, preload):
    """Runs target in a fresh process; LD_PRELOAD as preload says."""
    saved = os.environ.get("LD_PRELOAD")
    if not preload and saved is not None:
        os.environ["LD_PRELOAD"] = " ".join(
            x for x in saved.replace(":", " ").split() if "libipcbyval" not in x)
    a, b = ctx.Pipe()
    proc = ctx.Process(target=target, args=(b,) + args)
    try:
        proc.start()
    finally:
        if saved is not None:
            os.environ["LD_PRELOAD"] = saved
    try:
        if not a.poll(120):
            raise RuntimeError("consumer not ready in 120 s")
        first = a.recv()
        if first != "ready":
            return first
        a.send(payload)
        if not a.poll(300):
            raise RuntimeError("no answer from the consumer in 300 s")
        return a.recv()
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.terminate()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pools", default="1,16,64", help="pool sizes in GiB")
    ap.add_argument("--reps", type=int, default=3, help="ipcbyval consumers (first opens) a pool")
    ap.add_argument("--reopens", type=int, default=200, help="cached open+close cycles")
    ap.add_argument("--reimports", type=int, default=4, help="torch imports after the first")
    ap.add_argument("--dev", type=int, default=0, help="GPU of every process")
    args = ap.parse_args()
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if "expandable_segments:True" not in conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = ",".join(
            c for c in [conf, "expandable_segments:True"] if c)
    try:
        import cupy as cp
        import torch
        import torch.multiprocessing as mp
    except Exception as e:
        print(f"SKIP: torch_pool_bench: needs PyTorch and CuPy: {type(e).__name__}: {e}")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: torch_pool_bench: torch sees no CUDA device")
        return 77
    import io
    from multiprocessing.reduction import ForkingPickler

    dev = args.dev
    tdev = torch.device("cuda", dev)
    torch.cuda.set_device(dev)
    cp.cuda.Device(dev).use()
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                            ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
    preloaded = "libipcbyval" in os.environ.get("LD_PRELOAD", "")
    print(f"INFO torch {torch.__version__} cupy {cp.__version__} GPU {dev} "
          f"{torch.cuda.get_device_name(dev)}; ipcbyval {'preloaded' if preloaded else 'NOT loaded'}")
    ctx = mp.get_context("spawn")
    bad = 0
    for gib in [int(x) for x in args.pools.split(",") if x]:
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info(tdev)[0]
        need = gib * GIB + 3 * GIB  # and the consumers' contexts
        if free < need:
            print(f"pool_skip {gib} GPU {dev} has {free / GIB:.1f} GiB free; a {gib} GiB pool "
                  f"needs {need / GIB:.0f} GiB", flush=True)
            continue
        filler = torch.empty(gib * GIB - NBYTES, dtype=torch.uint8, device=tdev)
        t = torch.empty(NBYTES // 4, dtype=torch.int32, device=tdev)
        torch.arange(t.numel(), dtype=torch.int32, out=t)
        t.mul_(7).add_(TAG)
        torch.cuda.synchronize(tdev)
        b, s = ctypes.c_uint64(0), ctypes.c_size_t(0)
        if lib.cuMemGetAddressRange_v2(ctypes.byref(b), ctypes.byref(s), t.data_ptr()) != 0:
            print("ERROR torch_pool_bench: cuMemGetAddressRange failed on the tensor")
            return 1
        off = t.data_ptr() - b.value
        pages = -(-(off + NBYTES) // s.value)
        t0 = time.perf_counter()
        try:
            h = bytes(cp.cuda.runtime.ipcGetMemHandle(b.value))
        except Exception as ex:
            print(f"ERROR torch_pool_bench: the export was refused: {type(ex).__name__}: {ex}")
            return 1
        export_us = (time.perf_counter() - t0) * 1e6
        e = {"h": h, "off": off, "nbytes": NBYTES}
        firsts, reopens, errs = [], [], []
        for _ in range(args.reps):
            r = consume(ctx, byval_consumer, (dev, args.reopens), e, True)
            if "error" in r or not r.get("ok"):
                errs.append(f"ipcbyval consumer: {r.get('error', 'wrong data')}")
                continue
            firsts.append(r["first_us"])
            reopens.append(r["reopen_us"])
        datas = []
        for _ in range(1 + args.reimports):
            buf = io.BytesIO()
            ForkingPickler(buf).dump(t)
            datas.append(buf.getvalue())
        r = consume(ctx, torch_consumer, (dev,), datas, False)
        if "error" in r or not r.get("ok"):
            errs.append(f"torch consumer: {r.get('error', 'wrong data')}")
            r = {"first_us": float("nan"), "reimport_us": float("nan")}
        print(f"pool {gib} byval_first_us {median(firsts):.1f} byval_reopen_us "
              f"{median(reopens):.2f} torch_first_us {r['first_us']:.1f} torch_reimport_us "
              f"{r['reimport_us']:.1f} export_us {export_us:.1f} pages {pages}", flush=True)
        for x in errs:
            print(f"ERROR pool {gib}: {x}")
        bad += len(errs)
        del filler, t, datas
        torch.cuda.synchronize(tdev)
        torch.cuda.ipc_collect()  # what torch's own sharing still holds
        torch.cuda.empty_cache()
    if bad:
        print(f"ERROR torch_pool_bench: {bad} consumer(s) failed")
        return 1
    print("OK torch_pool_bench")
    return 0


if __name__ == "__main__":
    sys.exit(main())
