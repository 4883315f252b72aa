# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""One rank of a PyTorch job on simulated hosts, checking the multi-host contract.

Rank r runs with NCCL_DET_TEST_HOST=LAYOUT[r] (its own NCCL_HOSTID, so NCCL carries
the bytes between ranks as between machines) and NCCL_DET_STRICT=1 (a call that falls
back fails).  Every rank computes the contract's result on the CPU: hosts ordered by
their lowest rank, T over each host's ranks, T over the hosts' partials, both in the
accumulation type, avg divided once by the rank count, one rounding at the end; and
compares all_reduce bit for bit.  It also checks reduce_scatter_tensor against blocks
of the all-reduce, a CUDA-graph replay against eager, DDP's weights with 1 MB and
25 MB buckets against each other, and, for bf16 on hosts of more than one rank, that
a reference which rounds the host partials to bf16 disagrees (the partials must
travel in f32).  Prints one JSON line with a digest of every result (DDP's weights
too), which torch_hosts.sh compares across layouts.
Environment: RANK, WORLD, PORT, LAYOUT.
"""
import faulthandler
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

# The tree T, the test inputs and the bit view of the single-host test (same directory).
from torch_divert import bits, inputs, tree


def hosts_of(layout):
    """The ranks of each host, hosts in the order of their lowest rank."""
    order = []
    for name in layout:
        if name not in order:
            order.append(name)
    return [[r for r, name in enumerate(layout) if name == h] for h in order]


def reference(layout, dtype, count, seed, op, round_partials=False):
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    vals = [inputs(r, dtype, count, seed).to(acc) for r in range(len(layout))]
    partials = [tree([vals[r] for r in ranks], op) for ranks in hosts_of(layout)]
    if round_partials:
        partials = [p.to(dtype).to(acc) for p in partials]
    out = tree(partials, op)
    if op == "avg":
        out = out / len(layout)
    return out.to(dtype)


def train_ddp(rank, bucket_cap_mb, steps=4):
    """A small model trained a few steps under DDP; its final weights, on the CPU."""
    from torch.nn.parallel import DistributedDataParallel
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
    net = DistributedDataParallel(model, device_ids=[torch.cuda.current_device()],
                                  bucket_cap_mb=bucket_cap_mb)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randn(64, 512, generator=generator).cuda()
        y = torch.randn(64, 256, generator=generator).cuda()
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(net(x), y).backward()
        optimizer.step()
    torch.cuda.synchronize()
    weights = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    del net
    return weights


def mismatch(rank):
    """Settings that differ between hosts (torch_hosts.sh mismatch): a few all-reduces,
    then what ncclDetCommQuery says of the communicator.  torch_hosts.sh checks that
    every rank fell back for the same reason and that the ranks' results agree."""
    import ctypes
    digest = {}
    seed = 1000
    for dtype, op, count in ((torch.float32, dist.ReduceOp.SUM, 1000),
                             (torch.float32, dist.ReduceOp.SUM, (1 << 20) + 3),
                             (torch.bfloat16, dist.ReduceOp.AVG, 65537)):
        seed += 1
        data = inputs(rank, dtype, count, seed).cuda()
        dist.all_reduce(data, op=op)
        digest["%s/%d" % (str(dtype).split(".")[1], count)] = hashlib.sha1(
            bits(data.cpu()).numpy().tobytes()).hexdigest()
    pg = dist.distributed_c10d._get_default_group()
    comm = ctypes.c_void_p(pg._get_backend(torch.device("cuda"))._comm_ptr())
    query = ctypes.CDLL(None).ncclDetCommQuery
    diverted, reason = ctypes.c_int(), ctypes.c_char_p()
    status = query(comm, ctypes.byref(diverted), ctypes.byref(reason))
    print(json.dumps({"rank": rank, "status": status, "diverted": diverted.value,
                      "reason": (reason.value or b"").decode(errors="replace"),
                      "digest": digest}), flush=True)
    dist.destroy_process_group()


def phase(name):
    """Where the rank is, on stderr: the last line tells where a killed rank stood."""
    print("phase: %s" % name, file=sys.stderr, flush=True)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD"])
    # Every thread's Python stack on stderr shortly before torch_hosts.sh's timeout.
    faulthandler.dump_traceback_later(float(os.environ.get("STACKS_AFTER", "130")))
    phase("init")
    layout = os.environ["LAYOUT"]
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            init_method="tcp://127.0.0.1:%s" % os.environ["PORT"])
    if os.environ.get("BYTES_DTYPE"):
        # One all-reduce only, whose inter-host bytes torch_hosts.sh counts in NCCL's log.
        dtype = getattr(torch, os.environ["BYTES_DTYPE"])
        data = inputs(rank, dtype, int(os.environ["BYTES_COUNT"]), 1).cuda()
        dist.all_reduce(data)
        torch.cuda.synchronize()
        print(json.dumps({"rank": rank, "bytes_call": True}), flush=True)
        dist.destroy_process_group()
        return
    if os.environ.get("MISMATCH"):
        mismatch(rank)
        return
    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX}
    result = {"rank": rank, "layout": layout, "mismatch": 0, "checked": 0, "digest": {},
              "rounded_partials_differ": 0, "rs_mismatch": 0, "graph_mismatch": 0,
              "failures": []}
    seed = 0
    phase("all-reduce")
    g = len(layout) // len(hosts_of(layout))
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for opname, op in ops.items():
            for count in (1, 7, 1000, 65537, (1 << 20) + 3):
                seed += 1
                data = inputs(rank, dtype, count, seed).cuda()
                dist.all_reduce(data, op=op)
                got = data.cpu()
                want = reference(layout, dtype, count, seed, opname)
                bad = int((bits(got) != bits(want)).sum())
                key = "%s/%s/%d" % (str(dtype).split(".")[1], opname, count)
                result["checked"] += 1
                if bad:
                    result["mismatch"] += bad
                    result["failures"].append("%s: %d elements" % (key, bad))
                result["digest"][key] = hashlib.sha1(bits(got).numpy().tobytes()).hexdigest()
                if dtype == torch.bfloat16 and opname == "sum" and g > 1 and count >= 1000:
                    rounded = reference(layout, dtype, count, seed, opname, True)
                    result["rounded_partials_differ"] += int((bits(rounded) != bits(got)).sum())
    phase("reduce-scatter")
    # Reduce-scatter: rank r's block of the all-reduce of the same inputs.
    for dtype in (torch.float32, torch.bfloat16):
        for count in (1, 999, 70001):
            seed += 1
            full = inputs(rank, dtype, count * world, seed).cuda()
            out = torch.empty(count, dtype=dtype, device="cuda")
            dist.reduce_scatter_tensor(out, full, op=dist.ReduceOp.SUM)
            want = reference(layout, dtype, count * world, seed, "sum")[rank * count:(rank + 1) * count]
            result["rs_mismatch"] += int((bits(out.cpu()) != bits(want)).sum())
            result["checked"] += 1
    phase("graph")
    # A CUDA graph of two all-reduces, replayed, against the same calls eager.
    seed += 1
    base = inputs(rank, torch.bfloat16, 300001, seed).cuda()
    eager = base.clone()
    dist.all_reduce(eager)
    dist.all_reduce(eager, op=dist.ReduceOp.AVG)
    static = base.clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dist.all_reduce(static.clone())  # warm-up outside the capture, as PyTorch advises
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(static)
        dist.all_reduce(static, op=dist.ReduceOp.AVG)
    for _ in range(3):
        static.copy_(base)
        graph.replay()
        torch.cuda.synchronize()
        result["graph_mismatch"] += int((bits(static.cpu()) != bits(eager.cpu())).sum())
    result["checked"] += 1
    # The graph holds NCCL's sends and receives: NCCL's teardown waits for it to go.
    del graph
    # DDP across bucket sizes: the same weights with 1 MB and 25 MB buckets (an
    # all-reduce's bits do not depend on the message it is part of), and, through the
    # digests, the same on every layout the contract makes equal.
    ddp = {}
    for cap in (1, 25):
        phase("ddp %d MB buckets" % cap)
        ddp[cap] = train_ddp(rank, cap)
    result["ddp_differ"] = int((bits(ddp[1]) != bits(ddp[25])).sum())
    for cap, weights in ddp.items():
        result["digest"]["ddp/%d" % cap] = hashlib.sha1(bits(weights).numpy().tobytes()).hexdigest()
    result["checked"] += 1
    torch.cuda.synchronize()
    print(json.dumps(result), flush=True)
    phase("destroy")
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    phase("done")


if __name__ == "__main__":
    main()
