#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_pool_ipc: PyTorch expandable segments shared the way servers do.

Two MPI ranks: rank 0 exports tensors of its PyTorch pool
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, set here when missing)
with CuPy's cudaIpcGetMemHandle as vLLM does (base from
cuPointerGetAttribute(RANGE_START_ADDR), offset = data_ptr - base); rank 1
opens the handles with cudaIpcOpenMemHandle, reads the bytes over P2P into
its own tensors and compares them with the pattern. Rank r uses GPU
r % ngpus (--same-gpu: both on GPU 0).

    mpirun -np 2 [-x ...] scripts/ipcbyval-run python3 -u \\
        test/gpu/frameworks/torch_pool_ipc.py [--case release,grow,...]

Cases (all by default, in this order):
  release     the importer opens, reads and closes 4 x 128 MiB (a re-open
              must be a hit: the mappings are cached); the exporter frees
              them and empties its cache: its free GPU memory must return
              to the baseline while the importer stays idle
  grow        export a 32 MiB tensor, then grow the pool (32 + 100 MiB),
              50 open/read/close cycles (64 MiB more mid-way): all read
              right, >= 49 of 50 opens hits, no export withdrawn
  interleave  export A, allocate B, export B, ... (6 tensors, one in the
              small pool, handles got at the base or at the pointer): each
              opened and read right after its export and again after all;
              closed, re-opened: every re-open a hit
  vaspace     8 tensors of one pool held open together, 50 cycles: every
              pointer inside one reservation's span; VmSize does not grow
              with the cycles
  chunks      a 20 GiB tensor over > 1024 pages of 20 MiB (skipped without
              the memory), and > 1024 small-pool pages of 2 MiB: handles
              open; data at the start, middle and end, and one probe in
              every page, read right

Under ipcbyval the cache counts come from ipcbyval's own debug lines
("open: hit", "export withdrawn") in IPCBYVAL_LOG_FILE: the script
re-executes itself with IPCBYVAL_LOG=debug and
IPCBYVAL_LOG_FILE=$TMPDIR/torch_pool_ipc.%p.log when they are not set.
Without ipcbyval (natively) the exports are refused by the driver.

Output (rank 0): "INFO ..." lines, one "PASS: case: ...", "FAIL: case: ..."
or "SKIP: case: why" line per case, then "OK torch_pool_ipc" (exit 0) or
"ERROR torch_pool_ipc: ..." (exit 1); "SKIP: torch_pool_ipc: why" (exit
77) without torch, CuPy, mpi4py or a GPU.
"""
import argparse
import ctypes
import os
import sys
import time

MIB = 1 << 20
GIB = 1 << 30
CASES = ["release", "grow", "interleave", "vaspace", "chunks"]
MEMCPY_DEFAULT = 4  # cudaMemcpyDefault
MEMCPY_D2H = 2  # cudaMemcpyDeviceToHost
RANGE_START_ADDR = 11  # CU_POINTER_ATTRIBUTE_*
RANGE_SIZE = 12
IS_LEGACY_IPC = 10


def under_ipcbyval():
    return "libipcbyval" in os.environ.get("LD_PRELOAD", "")


def ensure_env():
    """Expandable segments on; under ipcbyval, its debug lines in a file
    this process can read (re-executes itself once to get them)."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if "expandable_segments:True" not in conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = ",".join(
            c for c in [conf, "expandable_segments:True"] if c)
    if not under_ipcbyval() or os.environ.get("TORCH_POOL_IPC_REEXEC"):
        return
    if (os.environ.get("IPCBYVAL_LOG") == "debug"
            and "%p" in os.environ.get("IPCBYVAL_LOG_FILE", "")):
        return
    import tempfile

    os.environ["IPCBYVAL_LOG"] = "debug"
    os.environ["IPCBYVAL_LOG_FILE"] = os.path.join(tempfile.gettempdir(),
                                                   "torch_pool_ipc.%p.log")
    os.environ["TORCH_POOL_IPC_REEXEC"] = "1"
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-u"] + sys.argv)


class ByvalLog:
    """Counts ipcbyval's debug lines in this process's log file."""

    def __init__(self):
        pat = os.environ.get("IPCBYVAL_LOG_FILE", "")
        self.path = pat.replace("%p", str(os.getpid())) if "%p" in pat else None
        self.usable = (under_ipcbyval() and self.path is not None
                       and os.environ.get("IPCBYVAL_LOG") == "debug")

    def counts(self):
        c = {"hit": 0, "miss": 0, "withdrawn": 0}
        if not self.usable:
            return c
        try:
            with open(self.path, errors="replace") as f:
                for line in f:
                    if "] debug: open: hit:" in line:
                        c["hit"] += 1
                    elif "] debug: open: miss" in line:
                        c["miss"] += 1
                    elif "] debug: export withdrawn:" in line:
                        c["withdrawn"] += 1
        except FileNotFoundError:
            pass
        return c


class Drv:
    """The few driver calls an application makes on its pointers."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                                   ctypes.c_uint64]
        self.lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                     ctypes.POINTER(ctypes.c_size_t),
                                                     ctypes.c_uint64]

    def attr(self, ptr, which):
        v = ctypes.c_uint64(0)
        r = self.lib.cuPointerGetAttribute(ctypes.byref(v), which, ptr)
        if r != 0:
            raise RuntimeError(f"cuPointerGetAttribute({which}, {ptr:#x}) = {r}")
        return v.value

    def range(self, ptr):
        """cuMemGetAddressRange: (base, size), or None when not mapped."""
        b, s = ctypes.c_uint64(0), ctypes.c_size_t(0)
        if self.lib.cuMemGetAddressRange_v2(ctypes.byref(b), ctypes.byref(s), ptr) != 0:
            return None
        return b.value, s.value


def vm_size():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class CaseError(Exception):
    pass


class CaseSkip(Exception):
    pass


class Ctx:
    def __init__(self, comm, torch, cp, dev, drv, log):
        self.comm, self.torch, self.cp, self.rt = comm, torch, cp, cp.cuda.runtime
        self.rank = comm.Get_rank()
        self.exporter = self.rank == 0
        self.dev = dev
        self.tdev = torch.device("cuda", dev)
        self.drv, self.log = drv, log
        self.keep = []  # the exporter's tensors of the case
        self.opened = []  # the importer's open pointers

    def step(self, fn):
        """fn on every rank; everyone's return values, or CaseError on
        every rank when one of them raised (no rank is left waiting)."""
        try:
            mine = (None, fn())
        except CaseSkip as e:
            mine = ("SKIP", str(e))
        except Exception as e:
            mine = (f"rank {self.rank} (GPU {self.dev}): {type(e).__name__}: {e}", None)
        got = self.comm.allgather(mine)
        skips = [v for e, v in got if e == "SKIP"]
        errs = [e for e, _ in got if e and e != "SKIP"]
        if errs:
            raise CaseError("; ".join(errs))
        if skips:
            raise CaseSkip("; ".join(skips))
        return [v for _, v in got]

    # ---- the exporter ----

    def tensor(self, nbytes, tag):
        """An int32 tensor of the pool filled with the pattern of tag."""
        t = self.torch.empty(nbytes // 4, dtype=self.torch.int32, device=self.tdev)
        pattern(self.torch, t, tag)
        self.keep.append(t)
        return t

    def export(self, t, at="base"):
        """(handle, offset, bytes) of tensor t: at "base", as vLLM sends them
        (the handle of RANGE_START_ADDR, the offset from it); at "ptr", as
        CuPy and PyTorch do (the handle of the pointer, the offset from the
        base of its allocation, cuMemGetAddressRange's: what the open of a
        handle returns)."""
        self.torch.cuda.synchronize(self.tdev)
        ptr = t.data_ptr()
        if self.drv.attr(ptr, IS_LEGACY_IPC) != 0:
            raise RuntimeError("the tensor is cudaMalloc memory, not an expandable segment")
        base = self.drv.attr(ptr, RANGE_START_ADDR) if at == "base" else self.drv.range(ptr)[0]
        h = bytes(self.rt.ipcGetMemHandle(base if at == "base" else ptr))
        return {"h": h, "off": ptr - base, "nbytes": t.numel() * 4}

    # ---- the importer ----

    def open(self, e):
        """The handle's pointer plus its offset: the tensor here."""
        p = self.rt.ipcOpenMemHandle(e["h"])
        self.opened.append(p)
        return p, p + e["off"]

    def close(self, p):
        self.opened.remove(p)
        self.rt.ipcCloseMemHandle(p)

    def read_ok(self, src, nbytes, tag):
        """The nbytes at src hold the pattern of tag: copied into a tensor
        of this GPU (P2P when the exporter's GPU is another) and compared,
        and compared in place by a kernel of this GPU."""
        torch, cp = self.torch, self.cp
        n = nbytes // 4
        got = torch.full((n,), -1, dtype=torch.int32, device=self.tdev)
        want = torch.empty(n, dtype=torch.int32, device=self.tdev)
        pattern(torch, want, tag)
        torch.cuda.synchronize(self.tdev)
        self.rt.memcpy(got.data_ptr(), src, nbytes, MEMCPY_DEFAULT)
        self.rt.deviceSynchronize()
        copied = bool(torch.equal(got, want))
        mem = cp.cuda.UnownedMemory(src, nbytes, None, device_id=self.dev)
        there = cp.ndarray((n,), cp.int32, cp.cuda.MemoryPointer(mem, 0))
        in_place = bool(cp.array_equal(there, cp.asarray(want)))
        self.rt.deviceSynchronize()
        return copied and in_place

    def probes_bad(self, src, idx, vals):
        """How many of the int32 elements idx at src are not vals."""
        buf = ctypes.c_int32(0)
        bad = 0
        for i, v in zip(idx, vals):
            buf.value = -1
            self.rt.memcpy(ctypes.addressof(buf), src + 4 * i, 4, MEMCPY_D2H)
            bad += buf.value != v
        return bad

    def cleanup(self):
        for p in list(self.opened):
            try:
                self.close(p)
            except Exception:
                self.opened.remove(p)
        self.keep.clear()
        self.torch.cuda.synchronize(self.tdev)
        self.torch.cuda.empty_cache()


def pattern(torch, t, tag):
    """t[i] = i * 7 + tag, in place: no temporary tensor (the pool's
    layout is the test's)."""
    torch.arange(t.numel(), dtype=torch.int32, out=t)
    t.mul_(7).add_(tag)


def checks_line(checks):
    """(ok, text) pairs -> (all ok, text of the failed ones or of all)."""
    bad = [t for ok, t in checks if not ok]
    return not bad, "; ".join(bad) if bad else "; ".join(t for _, t in checks)


# ---- the cases: every rank runs the same steps ----

def case_release(c):
    torch = c.torch
    sizes = [128 * MIB] * 4
    rel = {}

    def warm():
        # The importer's own allocations happen before the baseline (on one
        # GPU both ranks' memory is in the exporter's free count).
        if not c.exporter:
            a = torch.zeros(sizes[0] // 4, dtype=torch.int32, device=c.tdev)
            c.read_ok(a.data_ptr(), sizes[0], 0)  # allocates what the reads use
            del a
        torch.cuda.synchronize(c.tdev)

    c.step(warm)

    def make():
        if not c.exporter:
            return None
        torch.cuda.empty_cache()
        torch.cuda.synchronize(c.tdev)
        rel["base"] = torch.cuda.mem_get_info(c.tdev)[0]
        es = [c.export(c.tensor(s, 30 + i)) for i, s in enumerate(sizes)]
        rel["during"] = torch.cuda.mem_get_info(c.tdev)[0]
        return es

    es = c.step(make)[0]

    def use():
        if c.exporter:
            return None
        ok = 0
        for i, e in enumerate(es):
            p, src = c.open(e)
            ok += c.read_ok(src, e["nbytes"], 30 + i)
            c.close(p)
        before = c.log.counts()
        p, src = c.open(es[0])
        ok += c.read_ok(src, es[0]["nbytes"], 30)
        c.close(p)
        after = c.log.counts()
        return {"ok": ok, "hit": after["hit"] - before["hit"]}

    imp = c.step(use)[1]

    def free():
        if not c.exporter:
            return None  # idle: the release must come without a call
        c.keep.clear()
        torch.cuda.synchronize(c.tdev)
        torch.cuda.empty_cache()
        t0, free_now = time.monotonic(), 0
        while time.monotonic() - t0 < 30:
            free_now = torch.cuda.mem_get_info(c.tdev)[0]
            if free_now >= rel["base"] - 64 * MIB:
                break
            time.sleep(0.05)
        return {"base": rel["base"], "during": rel["during"], "after": free_now,
                "s": time.monotonic() - t0}

    m = c.step(free)[0]
    total = sum(sizes)
    used = m["base"] - m["during"]
    held = m["base"] - m["after"]
    return [
        (imp["ok"] == len(sizes) + 1, f"{imp['ok']}/{len(sizes) + 1} reads right"),
        (not c.log.usable or imp["hit"] >= 1,
         f"re-open after close a hit: {imp['hit']} hit(s) (closed mappings were cached)"),
        (used >= 0.9 * total, f"allocation seen in free memory: {used / MIB:.0f} MiB"),
        (held <= 64 * MIB, f"after free + empty_cache: {max(held, 0) / MIB:.0f} MiB of "
         f"{total / MIB:.0f} still held ({m['s']:.1f} s waited, importer idle)"),
    ]


def case_grow(c, opens):
    torch = c.torch
    half = opens // 2

    def make():
        if not c.exporter:
            return None
        torch.cuda.empty_cache()
        a = c.tensor(32 * MIB, 11)
        e = c.export(a)
        e["withdrawn0"] = c.log.counts()["withdrawn"]
        r0 = torch.cuda.memory_reserved(c.tdev)
        c.tensor(32 * MIB, 12)  # the pool grows after the export
        c.tensor(100 * MIB, 13)
        torch.cuda.synchronize(c.tdev)
        e["grew"] = torch.cuda.memory_reserved(c.tdev) - r0
        return e

    e = c.step(make)[0]
    res = {"ok": 0, "n": 0, "ptrs": set()}

    def cycles(n):
        def run():
            if c.exporter:
                return None
            if res["n"] == 0:
                res["c0"] = c.log.counts()
            for _ in range(n):
                p, src = c.open(e)
                res["ptrs"].add(p)
                res["ok"] += c.read_ok(src, e["nbytes"], 11)
                c.close(p)
                res["n"] += 1
            return None
        return run

    c.step(cycles(half))

    def grow_more():
        if c.exporter:
            r0 = torch.cuda.memory_reserved(c.tdev)
            c.tensor(64 * MIB, 14)
            torch.cuda.synchronize(c.tdev)
            e["grew"] += torch.cuda.memory_reserved(c.tdev) - r0

    c.step(grow_more)
    c.step(cycles(opens - half))

    def end():
        if c.exporter:
            a_ok = c.read_ok(c.keep[0].data_ptr(), e["nbytes"], 11)
            return {"a_ok": a_ok, "grew": e["grew"],
                    "withdrawn": c.log.counts()["withdrawn"] - e["withdrawn0"]}
        c1 = c.log.counts()
        return {"hit": c1["hit"] - res["c0"]["hit"], "miss": c1["miss"] - res["c0"]["miss"],
                "ok": res["ok"], "n": res["n"], "ptrs": len(res["ptrs"])}

    x, i = c.step(end)
    checks = [
        (x["grew"] >= 96 * MIB, f"pool grew {x['grew'] / MIB:.0f} MiB after the export"),
        (i["ok"] == opens and i["n"] == opens, f"{i['ok']}/{opens} opens read right"),
        (x["a_ok"], "exporter's tensor intact"),
    ]
    if c.log.usable:
        checks += [
            (i["hit"] >= opens - 1, f"{i['hit']}/{opens} opens hits ({i['miss']} miss lines)"),
            (x["withdrawn"] == 0, f"{x['withdrawn']} exports withdrawn by the growth"),
        ]
    else:
        checks.append((False, "hits not countable: no ipcbyval debug log in this process"))
    return checks + [(True, f"{i['ptrs']} distinct pointer(s)")]


def case_interleave(c):
    # (bytes, where the handle is got): the 64 KiB one is in the small pool
    plan = [(32 * MIB, "base"), (3 * MIB, "ptr"), (48 * MIB, "base"), (64 << 10, "ptr"),
            (20 * MIB, "ptr"), (7 * MIB, "base")]
    es, held, first = [], [], []

    for k, (nb, at) in enumerate(plan):
        def make(nb=nb, at=at, k=k):
            if c.exporter:
                return c.export(c.tensor(nb, 20 + k), at)

        es.append(c.step(make)[0])

        def use(k=k):
            if not c.exporter:
                p, src = c.open(es[k])
                held.append((p, src))
                first.append(c.read_ok(src, es[k]["nbytes"], 20 + k))

        c.step(use)

    def end():
        if c.exporter:
            return [c.read_ok(t.data_ptr(), t.numel() * 4, 20 + k) for k, t in enumerate(c.keep)]
        again = [c.read_ok(src, es[k]["nbytes"], 20 + k) for k, (_, src) in enumerate(held)]
        for p, _ in held:
            c.close(p)
        c0 = c.log.counts()
        re = []
        for k, e in enumerate(es):
            p, src = c.open(e)
            re.append(c.read_ok(src, e["nbytes"], 20 + k))
            c.close(p)
        c1 = c.log.counts()
        return {"first": first, "again": again, "re": re, "hit": c1["hit"] - c0["hit"]}

    x, i = c.step(end)
    n = len(plan)
    checks = [
        (sum(i["first"]) == n, f"{sum(i['first'])}/{n} read right just after their export"),
        (sum(i["again"]) == n, f"{sum(i['again'])}/{n} read right after all the exports"),
        (sum(i["re"]) == n, f"{sum(i['re'])}/{n} re-opens read right"),
        (all(x), "exporter's tensors intact"),
    ]
    if c.log.usable:
        checks.append((i["hit"] >= n, f"{i['hit']}/{n} re-opens hits"))
    return checks


def case_vaspace(c, cycles):
    torch = c.torch
    nt = 8

    def make():
        if c.exporter:
            torch.cuda.empty_cache()
            es = [c.export(c.tensor((k + 1) * 4 * MIB, 50 + k)) for k in range(nt)]
            return {"es": es, "total": torch.cuda.get_device_properties(c.tdev).total_memory}

    x = c.step(make)[0]
    es = x["es"]
    bound = int(1.2 * x["total"])  # PyTorch reserves 1 1/8 of the GPU's memory

    def run():
        if c.exporter:
            return None
        vm0 = vm_size()
        vm1 = vm = vm0
        span_max, vm_max, ok, rng = 0, 0, 0, None
        ptrs = [set() for _ in es]
        c0 = c.log.counts()
        for k in range(cycles):
            held = [c.open(e) for e in es]
            for j, (p, _) in enumerate(held):
                ptrs[j].add(p)
            lo = min(src for _, src in held)
            hi = max(src + e["nbytes"] for (_, src), e in zip(held, es))
            span_max = max(span_max, hi - lo)
            if k == 0:
                rng = c.drv.range(held[0][1])
            j = k % nt
            ok += c.read_ok(held[j][1], es[j]["nbytes"], 50 + j)
            # Measured after the read: its tensors may make this process's
            # own PyTorch pool reserve its range anew (after the previous
            # case's empty_cache), which is PyTorch's, not the imports'.
            vm = vm_size()
            vm_max = max(vm_max, vm - vm0)
            if k == 0:
                vm1 = vm
            for p, _ in held:
                c.close(p)
        c1 = c.log.counts()
        return {"span": span_max, "vm": vm_max, "vm_late": vm - vm1, "ok": ok,
                "hit": c1["hit"] - c0["hit"], "distinct": max(len(s) for s in ptrs),
                "range": rng[1] if rng else 0}

    i = c.step(run)[1]
    opens = cycles * nt
    return [
        (i["ok"] == cycles, f"{i['ok']}/{cycles} reads right"),
        (i["span"] <= bound, f"{nt} open at once span {i['span'] / GIB:.2f} GiB "
         f"(one reservation <= {bound / GIB:.0f} GiB)"),
        (i["vm_late"] <= GIB, f"VmSize {i['vm_late'] / MIB:+.0f} MiB from cycle 1 to {cycles} "
         f"(+{i['vm'] / GIB:.2f} GiB at most over the start)"),
        (True, f"{i['hit']}/{opens} opens hits, <= {i['distinct']} pointer(s) per handle, "
         f"imported range {i['range'] / MIB:.0f} MiB"),
    ]


def case_chunks(c):
    """A tensor over > 1024 large-pool pages (when the GPU has the memory),
    and > 1024 small-pool pages, each pool exported through one handle."""
    torch = c.torch
    checks = []
    w = 8 * MIB // 4  # elements in a window
    # Large pool: 1030 pages of 20 MiB in one tensor.
    page = 20 * MIB
    nbytes = 1030 * page

    def big():
        if not c.exporter:
            return None
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info(c.tdev)[0]
        if free < nbytes + 2 * GIB:
            return {"skip": f"{nbytes / GIB:.1f} GiB tensor: GPU {c.dev} has "
                            f"{free / GIB:.1f} GiB free"}
        t = torch.empty(nbytes // 4, dtype=torch.int32, device=c.tdev)
        c.keep.append(t)
        n = t.numel()
        wins = [0, (n // 2) // w * w, n - w]
        for k, a in enumerate(wins):
            pattern(torch, t[a:a + w], 70 + k)
        psize = c.drv.range(t.data_ptr())[1]
        e = c.export(t)
        pages = -(-(e["off"] + nbytes) // psize)
        probes = probe_plan(n, psize // 4, e["off"] // 4, wins, w)
        t[torch.tensor(probes[0], dtype=torch.int64, device=c.tdev)] = torch.tensor(
            probes[1], dtype=torch.int32, device=c.tdev)
        torch.cuda.synchronize(c.tdev)
        e.update(wins=wins, pages=pages, psize=psize, probes=probes)
        return e

    eb = c.step(big)[0]
    if eb and "skip" not in eb:
        def open_big():
            if c.exporter:
                return None
            p, src = c.open(eb)
            ok = [c.read_ok(src + a * 4, w * 4, 70 + k) for k, a in enumerate(eb["wins"])]
            bad = c.probes_bad(src, *eb["probes"])
            c.close(p)
            return {"win": sum(ok), "bad": bad}

        i = c.step(open_big)[1]
        checks += [
            (eb["pages"] > 1024, f"large pool: one tensor over {eb['pages']} pages of "
             f"{eb['psize'] // MIB} MiB"),
            (i["win"] == 3, f"{i['win']}/3 windows (start, middle, end) read right"),
            (i["bad"] == 0, f"{len(eb['probes'][0]) - i['bad']}/{len(eb['probes'][0])} "
             "page probes read right"),
        ]
    else:
        checks.append((True, f"large pool skipped ({eb['skip']})"))

    def clean_big():
        if c.exporter:
            c.keep.clear()
            torch.cuda.synchronize(c.tdev)
            torch.cuda.empty_cache()

    c.step(clean_big)

    # Small pool: 2200 tensors just under 1 MiB, two a 2 MiB page.
    ns, elems = 2200, (MIB - 512) // 4

    def small():
        if not c.exporter:
            return None
        ts = [torch.empty(elems, dtype=torch.int32, device=c.tdev) for _ in range(ns)]
        c.keep.extend(ts)
        ts.sort(key=lambda t: t.data_ptr())
        lo, hi = ts[0], ts[-1]
        pattern(torch, lo, 80)
        pattern(torch, hi, 81)
        for k in range(1, ns - 1):
            ts[k][0] = k * 5 + 3
        torch.cuda.synchronize(c.tdev)
        base, psize = c.drv.range(lo.data_ptr())
        end = hi.data_ptr() + elems * 4
        # Every page from the first tensor's to the last one's mapped?
        run = all(c.drv.range(a) is not None for a in range(base, end, psize))
        e_lo, e_hi = c.export(lo), c.export(hi)
        return {"lo": e_lo, "hi": e_hi, "pages": -(-(end - base) // psize), "psize": psize,
                "run": run, "span": end - lo.data_ptr(),
                "idx": [(t.data_ptr() - lo.data_ptr()) // 4 for t in ts[1:-1]],
                "vals": [k * 5 + 3 for k in range(1, ns - 1)]}

    es = c.step(small)[0]

    def open_small():
        if c.exporter:
            return None
        p, src = c.open(es["lo"])
        lo_ok = c.read_ok(src, es["lo"]["nbytes"], 80)
        through = None
        if es["run"]:  # the first handle reaches the end of the mapped run
            through = c.probes_bad(src, es["idx"], es["vals"])
        q, src2 = c.open(es["hi"])
        hi_ok = c.read_ok(src2, es["hi"]["nbytes"], 81)
        c.close(q)
        c.close(p)
        return {"lo": lo_ok, "hi": hi_ok, "through": through}

    i = c.step(open_small)[1]
    checks += [
        (es["pages"] > 1024, f"small pool: {ns} tensors over {es['pages']} pages of "
         f"{es['psize'] // MIB} MiB"),
        (i["lo"] and i["hi"], f"first and last tensor read right ({i['lo']}, {i['hi']})"),
    ]
    if i["through"] is None:
        checks.append((True, "pages not one mapped run: the first handle's reach not checked"))
    else:
        checks.append((i["through"] == 0, f"{ns - 2 - i['through']}/{ns - 2} tensors read "
                       "right through the first handle"))
    return checks


def probe_plan(n, page_elems, first_off, wins, w):
    """One element in the middle of every page the tensor covers, outside
    the windows: (indices, values)."""
    idx, vals = [], []
    k = 0
    while True:
        i = k * page_elems + page_elems // 2 - first_off
        if i >= n:
            break
        if i >= 0 and not any(a <= i < a + w for a in wins):
            idx.append(i)
            vals.append(k * 3 + 1)
        k += 1
    return idx, vals


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default=",".join(CASES),
                    help=f"comma-separated, from {','.join(CASES)} (default: all)")
    ap.add_argument("--opens", type=int, default=50, help="open/read/close cycles (grow)")
    ap.add_argument("--cycles", type=int, default=50, help="cycles of 8 opens (vaspace)")
    ap.add_argument("--same-gpu", action="store_true", help="both ranks on GPU 0")
    args = ap.parse_args()
    cases = [x for x in args.case.split(",") if x]
    unknown = [x for x in cases if x not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {CASES}")
    ensure_env()
    try:
        from mpi4py import MPI
        import cupy as cp
        import torch
    except Exception as e:
        print(f"SKIP: torch_pool_ipc: needs mpi4py, CuPy and PyTorch: {type(e).__name__}: {e}")
        return 77
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if not torch.cuda.is_available():
        if rank == 0:
            print("SKIP: torch_pool_ipc: torch sees no CUDA device")
        return 77
    if size != 2:
        if rank == 0:
            print(f"ERROR torch_pool_ipc: needs 2 ranks (mpirun -np 2), has {size}")
        return 1
    ngpus = torch.cuda.device_count()
    dev = 0 if args.same_gpu else rank % ngpus
    torch.cuda.set_device(dev)
    cp.cuda.Device(dev).use()
    torch.zeros(1, device=torch.device("cuda", dev))  # the primary context, current
    c = Ctx(comm, torch, cp, dev, Drv(), ByvalLog())
    if rank == 0:
        print(f"INFO torch {torch.__version__} cupy {cp.__version__} gpus {ngpus}: exporter "
              f"on GPU {dev}, importer on GPU {0 if args.same_gpu else 1 % ngpus}; "
              f"PYTORCH_CUDA_ALLOC_CONF={os.environ['PYTORCH_CUDA_ALLOC_CONF']}; "
              f"ipcbyval {'preloaded' if under_ipcbyval() else 'not loaded (native)'}")
    logs = comm.gather(c.log.path if c.log.usable else "-", root=0)
    if rank == 0 and under_ipcbyval():
        print(f"INFO ipcbyval debug logs: exporter {logs[0]}, importer {logs[1]}")
    failed = 0
    for name in cases:
        try:
            if name == "release":
                checks = case_release(c)
            elif name == "grow":
                checks = case_grow(c, args.opens)
            elif name == "interleave":
                checks = case_interleave(c)
            elif name == "vaspace":
                checks = case_vaspace(c, args.cycles)
            else:
                checks = case_chunks(c)
            ok, text = checks_line(checks)
            verdict = f"{'PASS' if ok else 'FAIL'}: {name}: {text}"
            failed += not ok
        except CaseSkip as e:
            verdict = f"SKIP: {name}: {e}"
        except CaseError as e:
            verdict = f"FAIL: {name}: {e}"
            failed += 1
        except Exception as e:  # the script's own error, on every rank
            verdict = f"FAIL: {name}: {type(e).__name__}: {e}"
            failed += 1
        try:
            c.cleanup()
        except Exception as e:
            verdict += f" (cleanup: {type(e).__name__}: {e})"
        comm.Barrier()
        if rank == 0:
            print(verdict, flush=True)
    if rank == 0:
        print("OK torch_pool_ipc" if not failed else f"ERROR torch_pool_ipc: {failed} case(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
