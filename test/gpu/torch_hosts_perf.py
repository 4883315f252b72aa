# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""One rank of the multi-host all-reduce benchmark (torch_hosts_perf.sh).

NCCL and nccl-det on the same communicator in the same processes: the communicator
comes from libnccl-det.so (ctypes, as vLLM's pynccl loads NCCL), nccl-det's
all-reduce is that library's ncclAllReduce, NCCL's is the real library's
(ncclDetGetNcclLibrary), on the same buffers and stream.  Rounds alternate the two.
Rank 0 prints one line per row: dtype, bytes, mode (eager or graph: ITERS calls
captured in one CUDA graph), NCCL's and nccl-det's microseconds per call (medians
over ROUNDS rounds of ITERS calls, after WARMUP of each), and a third time: the
bytes of nccl-det's two network stages moved by the real NCCL alone, as two grouped
ncclSend/ncclRecv rounds with the peers of the schedule (doc/multihost-design.md),
whole messages, no kernel of ours: the floor of a schedule whose network stages do
not overlap each other, on whatever carries NCCL's bytes.  PyTorch's own process
group is gloo: it only carries the unique id.
Environment: RANK, WORLD, PORT, NDET_LIB, LAYOUT (one letter per rank: its host),
SIZES, DTYPES, ITERS, ROUNDS, WARMUP.
"""
import ctypes
import faulthandler
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

NCCL_TYPES = {"float32": 7, "bfloat16": 9, "float16": 6}
NCCL_SUM = 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def bind(lib):
    lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return lib.ncclAllReduce


def exchange_shape(layout, rank, count, elem_size):
    """Peers and bytes per transfer of the network stages of `rank` (each stage: one
    block of count / (g x H) partials to, and one from, the rank of the same local
    index on every other host; partials are f32 for 16-bit data where g > 1)."""
    hosts = []
    for letter in layout:
        if letter not in hosts:
            hosts.append(letter)
    members = {h: [r for r, letter in enumerate(layout) if letter == h] for h in hosts}
    g = len(members[layout[rank]])
    local = members[layout[rank]].index(rank)
    peers = [members[h][local] for h in hosts if h != layout[rank]]
    partial = elem_size if g == 1 else max(elem_size, 4)
    block = -(-count // (g * len(hosts)))
    return peers, block * partial


def timed(fn, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            init_method="tcp://127.0.0.1:%s" % os.environ["PORT"])
    det = ctypes.CDLL(os.environ["NDET_LIB"])
    path, version, found = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_char_p()
    assert det.ncclDetGetNcclLibrary(ctypes.byref(path), ctypes.byref(version),
                                     ctypes.byref(found)) == 0
    real = ctypes.CDLL(path.value.decode())
    unique = UniqueId()
    if rank == 0:
        assert real.ncclGetUniqueId(ctypes.byref(unique)) == 0
    holder = [bytes(unique.internal)]
    dist.broadcast_object_list(holder, src=0)
    ctypes.memmove(ctypes.byref(unique), holder[0], 128)
    comm = ctypes.c_void_p()
    det.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId,
                                     ctypes.c_int]
    assert det.ncclCommInitRank(ctypes.byref(comm), world, unique, rank) == 0
    diverted, reason = ctypes.c_int(-1), ctypes.c_char_p()
    det.ncclDetCommQuery.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                                     ctypes.POINTER(ctypes.c_char_p)]
    assert det.ncclDetCommQuery(comm, ctypes.byref(diverted), ctypes.byref(reason)) == 0
    if diverted.value != 1:
        print("FAIL rank %d: not diverted: %s" % (rank, (reason.value or b"").decode()),
              flush=True)
        sys.exit(1)
    calls = {"nccl": bind(real), "ndet": bind(det)}
    for fn in (real.ncclSend, real.ncclRecv):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_void_p, ctypes.c_void_p]
    layout = os.environ.get("LAYOUT", "".join(chr(ord("A") + r) for r in range(world)))
    NCCL_UINT8 = 1
    iters, rounds = int(os.environ.get("ITERS", "10")), int(os.environ.get("ROUNDS", "5"))
    warmup = int(os.environ.get("WARMUP", "3"))
    for name in os.environ.get("DTYPES", "float32,bfloat16").split(","):
        dtype = getattr(torch, name)
        for size in (int(s) for s in os.environ.get("SIZES", str(16 << 20)).split(",")):
            count = size * 8 // torch.finfo(dtype).bits
            data = torch.randn(count, device="cuda").to(dtype)

            peers, block_bytes = exchange_shape(layout, rank, count, data.element_size())
            scratch = torch.empty(2 * max(1, len(peers)) * block_bytes, dtype=torch.uint8,
                                  device="cuda")

            def exchange(stream):
                for _ in range(2):  # stage 2, then stage 4
                    assert real.ncclGroupStart() == 0
                    for k, peer in enumerate(peers):
                        out = scratch.data_ptr() + k * block_bytes
                        into = scratch.data_ptr() + (len(peers) + k) * block_bytes
                        assert real.ncclSend(out, block_bytes, NCCL_UINT8, peer, comm,
                                             stream) == 0
                        assert real.ncclRecv(into, block_bytes, NCCL_UINT8, peer, comm,
                                             stream) == 0
                    assert real.ncclGroupEnd() == 0

            def call(who):
                # The current stream: torch.cuda.graph captures on a stream of its own.
                stream = torch.cuda.current_stream().cuda_stream
                if who == "p2p":
                    exchange(ctypes.c_void_p(stream))
                    return
                result = calls[who](data.data_ptr(), data.data_ptr(), count, NCCL_TYPES[name],
                                    NCCL_SUM, comm, ctypes.c_void_p(stream))
                assert result == 0, "%s all-reduce returned %d" % (who, result)

            whos = list(calls) + ["p2p"]
            times = {(who, mode): [] for who in whos for mode in ("eager", "graph")}
            graphs = {}
            for who in whos:
                for _ in range(warmup):
                    call(who)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(iters):
                        call(who)
                graph.replay()
                graphs[who] = graph
            torch.cuda.synchronize()
            for _ in range(rounds):
                for who in whos:
                    times[(who, "eager")].append(timed(lambda: call(who), iters))
                    times[(who, "graph")].append(timed(graphs[who].replay, 1) / iters)
            if rank == 0:
                for mode in ("eager", "graph"):
                    print("ROW %s %d %s %.1f %.1f %.1f" % (
                        name, size, mode, statistics.median(times[("nccl", mode)]),
                        statistics.median(times[("ndet", mode)]),
                        statistics.median(times[("p2p", mode)])), flush=True)
            # NCCL's finalize waits for every graph that captured its work to go.
            del graphs, graph
    # How long the teardown takes, step by step (a hang here shows where: every
    # thread's Python stack after TEARDOWN_DUMP seconds).
    begin = time.monotonic()
    faulthandler.dump_traceback_later(float(os.environ.get("TEARDOWN_DUMP", "60")))
    torch.cuda.synchronize()

    def step(what):
        print("rank %d: %s after %.1f s" % (rank, what, time.monotonic() - begin),
              file=sys.stderr, flush=True)

    step("the device is synchronised")
    det.ncclCommFinalize.argtypes = [ctypes.c_void_p]
    det.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    assert det.ncclCommFinalize(comm) == 0
    step("ncclCommFinalize returned")
    assert det.ncclCommDestroy(comm) == 0
    step("ncclCommDestroy returned")
    dist.destroy_process_group()
    step("the process group is destroyed")
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
