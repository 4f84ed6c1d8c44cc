#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""mpi4py_cupy_ipc: CuPy arrays shared by CUDA IPC handle sent with mpi4py.

Run with 2 ranks (mpirun -np 2 python3 -u mpi4py_cupy_ipc.py); rank r uses
GPU r % ngpus. CuPy's memory pool is off, so every array is its own
cudaMalloc. Rank 0 makes a 64 MiB float32 array and a 12345-element int32
array, gets their handles with cupy.cuda.runtime.ipcGetMemHandle and sends
the 64-byte handles with comm.send. Rank 1 opens the float array --iters
times (ipcOpenMemHandle, check every element and the sum with kernels on
its own GPU, ipcCloseMemHandle: the re-opens are what ipcbyval caches),
then opens the int array, adds 1 in place and closes; rank 0 checks that
it sees the write.

Rank 0 prints "INFO ...", "RESULT ..." (deterministic, compared between a
native run and one under ipcbyval), "TIME open_close_us median=... first=..."
then "OK mpi4py_cupy_ipc" (exit 0) or "ERROR ..." (exit 1 on every rank).
"""
import argparse
import sys
import time

NA = 16 << 20  # float32 elements: 64 MiB
NB = 12345


def expected(cp):
    a = (cp.arange(NA, dtype=cp.int64) % 4096).astype(cp.float32)
    b = cp.arange(NB, dtype=cp.int32) * 7
    return a, b


def view(cp, ptr, n, dtype, dev):
    """An ndarray over n elements at ptr on device dev (not owned)."""
    nbytes = n * cp.dtype(dtype).itemsize
    mem = cp.cuda.UnownedMemory(ptr, nbytes, None, device_id=dev)
    return cp.ndarray((n,), dtype, cp.cuda.MemoryPointer(mem, 0))


def importer(cp, rt, comm, dev, iters, res):
    msg = comm.recv(source=0, tag=1)
    if msg is None:
        raise RuntimeError("rank 0 sent no handles")
    ea, eb = expected(cp)
    times = []
    for it in range(iters):
        t0 = time.perf_counter()
        ptr = rt.ipcOpenMemHandle(msg["ha"])
        t1 = time.perf_counter()
        arr = view(cp, ptr, NA, cp.float32, dev)
        equal = bool(cp.array_equal(arr, ea))
        total = int(arr.astype(cp.float64).sum().item())
        del arr
        t2 = time.perf_counter()
        rt.ipcCloseMemHandle(ptr)
        t3 = time.perf_counter()
        times.append(((t1 - t0) + (t3 - t2)) * 1e6)
        res["a_equal"] = res.get("a_equal", True) and equal
        res["a_sum"] = total
    ptr = rt.ipcOpenMemHandle(msg["hb"])
    arr = view(cp, ptr, NB, cp.int32, dev)
    res["b_equal"] = bool(cp.array_equal(arr, eb))
    arr += 1
    cp.cuda.runtime.deviceSynchronize()
    del arr
    rt.ipcCloseMemHandle(ptr)
    res["times"] = times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    try:
        from mpi4py import MPI
        import cupy as cp
    except Exception as e:
        print(f"SKIP mpi4py/cupy import failed: {type(e).__name__}: {e}")
        return 77
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rt = cp.cuda.runtime
    ngpus = rt.getDeviceCount()
    dev = rank % ngpus
    cp.cuda.Device(dev).use()
    cp.cuda.set_allocator(None)  # each array its own cudaMalloc
    res = {"error": None}
    a = b = None
    try:
        if rank == 0:
            msg = None  # tells rank 1 there is nothing to open
            try:
                a, b = expected(cp)
                rt.deviceSynchronize()
                msg = {"ha": bytes(rt.ipcGetMemHandle(a.data.ptr)),
                       "hb": bytes(rt.ipcGetMemHandle(b.data.ptr))}
            finally:
                if size > 1:
                    comm.send(msg, dest=1, tag=1)
        elif rank == 1:
            importer(cp, rt, comm, dev, args.iters, res)
    except Exception as e:
        res["error"] = f"rank {rank} (GPU {dev}): {type(e).__name__}: {e}"
    comm.Barrier()  # rank 1 is done with rank 0's memory
    if rank == 0 and res["error"] is None:
        try:
            _, eb = expected(cp)
            res["writeback"] = bool(cp.array_equal(b, eb + 1))
        except Exception as e:
            res["error"] = f"rank 0: {type(e).__name__}: {e}"
    results = comm.gather(res, root=0)
    bad = 0
    if rank == 0:
        errors = [r["error"] for r in results if r["error"]]
        r1 = results[1] if size > 1 else {}
        print(f"INFO cupy {cp.__version__} ranks {size} gpus {ngpus}: "
              f"rank 0 on GPU 0, rank 1 on GPU {1 % ngpus}")
        if errors or size < 2:
            print("ERROR " + ("; ".join(errors) or "needs 2 ranks"))
            bad = 1
        else:
            exp_sum = (NA // 4096) * (4095 * 4096 // 2)
            t = sorted(r1["times"])
            print(f"RESULT a float32x{NA} opened {len(t)} times equal={r1['a_equal']} "
                  f"sum={r1['a_sum']} expected={exp_sum}")
            print(f"RESULT b int32x{NB} equal={r1['b_equal']} writeback_seen={res['writeback']}")
            print(f"TIME open_close_us median={t[len(t) // 2]:.1f} first={r1['times'][0]:.1f}")
            ok = r1["a_equal"] and r1["a_sum"] == exp_sum and r1["b_equal"] and res["writeback"]
            print("OK mpi4py_cupy_ipc" if ok else "ERROR wrong data")
            bad = 0 if ok else 1
    bad = comm.bcast(bad, root=0)
    del a, b
    return bad


if __name__ == "__main__":
    sys.exit(main())
