# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""One rank of a PyTorch job that checks diverted all-reduces bit for bit.

Every rank generates every rank's input from seeds, computes the nccl-det tree on the
CPU (f32 accumulation for f32/f16/bf16, f64 for f64, one final rounding) and compares
the all_reduce result bit for bit.  It also reduces the same values inside a larger
call at an offset and compares the shared elements (size/offset invariance).  Run it
with and without LD_PRELOAD=libnccl-det.so: under nccl-det every count must be 0;
under plain NCCL the counts show how often NCCL's bits differ from the tree and
between sizes.  Environment: RANK, WORLD, PORT, DIVERT_LARGE.  Prints one JSON line.
"""
import json
import os

import torch
import torch.distributed as dist


def tree(values, op):
    """The nccl-det tree over rank order: left subtree = largest power of two < m."""
    if len(values) == 1:
        return values[0]
    p = 1
    while p * 2 < len(values):
        p *= 2
    left, right = tree(values[:p], op), tree(values[p:], op)
    if op == "sum" or op == "avg":
        return left + right
    if op == "prod":
        return left * right
    if op == "max":
        return torch.maximum(left, right)
    return torch.minimum(left, right)


def inputs(rank, dtype, count, seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    mant = torch.rand(count, generator=g, dtype=torch.float64) + 1.0
    expo = torch.randint(-12, 12, (count,), generator=g)
    sign = torch.randint(0, 2, (count,), generator=g) * 2 - 1
    return (mant * torch.pow(2.0, expo.double()) * sign).to(dtype)


def reference(world, dtype, count, seed, op):
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    vals = [inputs(r, dtype, count, seed).to(acc) for r in range(world)]
    out = tree(vals, op)
    if op == "avg":
        out = out / world
    return out.to(dtype)


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else (
        t.view(torch.int32) if t.element_size() == 4 else t.view(torch.int64))


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD"])
    # One GPU per rank when there are enough, else ranks share GPU 0 (NCCL_HOSTID).
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            init_method="tcp://127.0.0.1:%s" % os.environ["PORT"])
    ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
           "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}
    result = {"rank": rank, "mismatch": {}, "size_variant": {}, "elements": 0}
    # DIVERT_LARGE=COUNT adds one f32 sum of COUNT elements (16777216 = 64 MiB: the
    # push protocol by default), and its offset copy an unaligned one.
    large = int(os.environ.get("DIVERT_LARGE", "0"))
    seed = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for opname, op in ops.items():
            counts = (1, 7, 1000, 65537, (1 << 20) + 3)
            if large and dtype == torch.float32 and opname == "sum":
                counts += (large,)
            for count in counts:
                seed += 1
                data = inputs(rank, dtype, count, seed).cuda()
                dist.all_reduce(data, op=op)
                want = reference(world, dtype, count, seed, opname)
                got = data.cpu()
                bad = int((bits(got) != bits(want)).sum())
                key = "%s/%s" % (str(dtype).split(".")[1], opname)
                result["mismatch"][key] = result["mismatch"].get(key, 0) + bad
                result["elements"] += count
                # The same values at offset 5 inside a call of count + 9 elements.
                big = torch.cat([inputs(rank, dtype, 5, seed + 10000), inputs(rank, dtype, count, seed),
                                 inputs(rank, dtype, 4, seed + 20000)]).cuda()
                dist.all_reduce(big, op=op)
                variant = int((bits(big.cpu()[5:5 + count]) != bits(got)).sum())
                result["size_variant"][key] = result["size_variant"].get(key, 0) + variant
    torch.cuda.synchronize()
    result["total_mismatch"] = sum(result["mismatch"].values())
    result["total_size_variant"] = sum(result["size_variant"].values())
    print(json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
