# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""One rank of the multi-host all-reduce benchmark (torch_hosts_perf.sh).

Times dist.all_reduce, eager and replayed from a CUDA graph, at SIZES (bytes) for
DTYPES, and prints one line per row on rank 0: dtype, bytes, mode, microseconds per
call (the median of ROUNDS rounds of ITERS calls, after WARMUP).  Whether nccl-det or
NCCL runs the calls is the caller's choice (LD_PRELOAD, NCCL_DET_ENABLE).
Environment: RANK, WORLD, PORT, SIZES, DTYPES, ITERS, ROUNDS, WARMUP.
"""
import os
import statistics

import torch
import torch.distributed as dist


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
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            init_method="tcp://127.0.0.1:%s" % os.environ["PORT"])
    iters, rounds = int(os.environ.get("ITERS", "10")), int(os.environ.get("ROUNDS", "5"))
    warmup = int(os.environ.get("WARMUP", "3"))
    for name in os.environ.get("DTYPES", "float32,bfloat16").split(","):
        dtype = getattr(torch, name)
        for size in (int(s) for s in os.environ.get("SIZES", str(16 << 20)).split(",")):
            data = torch.randn(size // torch.finfo(dtype).bits * 8, device="cuda").to(dtype)
            for _ in range(warmup):
                dist.all_reduce(data)
            eager = statistics.median(timed(lambda: dist.all_reduce(data), iters)
                                      for _ in range(rounds))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(iters):
                    dist.all_reduce(data)
            graph.replay()
            graphed = statistics.median(timed(graph.replay, 1) / iters for _ in range(rounds))
            if rank == 0:
                print("ROW %s %d eager %.1f" % (name, size, eager), flush=True)
                print("ROW %s %d graph %.1f" % (name, size, graphed), flush=True)
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
