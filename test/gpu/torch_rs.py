# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""One rank of a PyTorch job: reduce-scatter, PreMulSum and FSDP2 under nccl-det.

MODE=collectives (default): dist.reduce_scatter_tensor with sum, avg, min, max,
product and PreMulSum (torch.distributed._make_nccl_premul_sum with a Python float, a
host scalar for NCCL, and with a one-element CUDA tensor, a device scalar), and
dist.all_reduce with PreMulSum, for f32, bf16, f16 and f64.  Every rank generates
every rank's input from seeds and computes nccl-det's tree on the CPU: leaves widened
to the accumulation type (f32 for f32/f16/bf16, f64 for f64), PreMulSum leaves
multiplied there by the rank's scalar (rounded to the dtype first, as PyTorch passes
it), one tree of adds over rank order (left subtree = largest power of two below m),
avg divided by the world size, one final rounding.  It counts
  - mismatches of each reduce-scatter block and all-reduce against that tree;
  - reduce-scatter blocks that differ from the matching slice of an all_reduce of the
    same data (both on the GPU);
  - bucketing variance: the same tensors reduce-scattered as one flat bucket and one
    by one (FSDP's bucketing, directly): element bits that differ between the two.
MODE=fsdp CONFIG=a|b: a small MLP trained for STEPS steps with FSDP2 (fully_shard),
  a: every Linear its own FSDP unit (one reduce-scatter per layer), resharded after
     forward, explicit forward/backward prefetch of the next/previous layer;
  b: the root only (one bucket for every gradient), kept unsharded after forward,
     no explicit prefetch.
  Rank 0 prints a SHA-256 of the final full weights (bits).

Environment: RANK, WORLD, PORT, MODE, CONFIG, STEPS.  Prints one JSON line.
"""
import hashlib
import json
import os

# Before the first cuBLAS handle: FSDP mode asks for deterministic algorithms.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

# The tree, the seeded inputs and the bit view of torch_divert.py (next to this file).
from torch_divert import bits, inputs  # noqa: E402
from torch_divert import tree as tree_op  # noqa: E402

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
# Not powers of two: the products round, so a wrong multiply order shows.
SCALARS = (0.7, -1.3, 1.0 / 3.0, 2.9, -0.1, 1.1, 5.9, -0.37)


def nccl_scalar(value, dtype):
    """The scalar NCCL, and nccl-det like it, reads for a PyTorch PREMUL_SUM: the
    ncclTypeSize(datatype) bytes at the pointer ProcessGroupNCCL passes.  For bfloat16,
    PyTorch passes a float32 (unpackPreMulSum<float, ncclBfloat16>; a device factor
    must be a float32 tensor), so both read the low half of the float's bits."""
    if dtype == torch.bfloat16:
        return torch.tensor([value], dtype=torch.float32).view(torch.bfloat16)[0]
    return torch.tensor(value, dtype=dtype)


def device_factor(value, dtype):
    """The one-element CUDA tensor PyTorch accepts as a device PreMulSum factor."""
    return torch.tensor([value], dtype=torch.float32 if dtype == torch.bfloat16 else dtype,
                        device="cuda")


def tree(values):
    """nccl-det's tree of adds over rank order."""
    return tree_op(values, "sum")


def acc_type(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def reference(world, dtype, count, seed, op):
    """The all-reduce of every rank's input (op: sum/avg/prod/min/max/premul)."""
    acc = acc_type(dtype)
    vals = [inputs(r, dtype, count, seed).to(acc) for r in range(world)]
    if op == "premul":
        # The scalar NCCL reads, widened; each product rounded once in acc.
        vals = [v * nccl_scalar(SCALARS[r % len(SCALARS)], dtype).to(acc)
                for r, v in enumerate(vals)]
        out = tree(vals)
    else:
        out = tree_op(vals, op)
    if op == "avg":
        out = out / world
    return out.to(dtype)


def differ(a, b):
    return int((bits(a.cpu()) != bits(b.cpu())).sum())


def run_collectives(rank, world):
    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN, "prod": dist.ReduceOp.PRODUCT}
    result = {"rank": rank, "mismatch": {}, "rs_vs_ar": 0, "bucketing_variant": 0,
              "elements": 0}
    seed = 0
    for dtype in DTYPES:
        name = str(dtype).split(".")[1]
        scalar = SCALARS[rank % len(SCALARS)]
        variants = list(ops.items()) + [
            ("premul", lambda: dist._make_nccl_premul_sum(scalar)),
            ("premul-device", lambda: dist._make_nccl_premul_sum(device_factor(scalar, dtype)))]
        for opname, op in variants:
            for count in (1, 37, 65537):
                seed += 1
                refop = "premul" if opname.startswith("premul") else opname
                total = count * world
                data = inputs(rank, dtype, total, seed).cuda()
                out = torch.empty(count, dtype=dtype, device="cuda")
                dist.reduce_scatter_tensor(out, data, op=op() if callable(op) else op)
                want = reference(world, dtype, total, seed, refop)
                key = "%s/%s" % (name, opname)
                bad = differ(out, want[rank * count:(rank + 1) * count])
                # The all-reduce of the same data holds every block.
                whole = data.clone()
                dist.all_reduce(whole, op=op() if callable(op) else op)
                bad += differ(whole, want)
                result["rs_vs_ar"] += differ(out, whole[rank * count:(rank + 1) * count])
                result["mismatch"][key] = result["mismatch"].get(key, 0) + bad
                result["elements"] += total
    # Bucketing: three "gradients" reduce-scattered as one flat bucket (each rank's
    # shards side by side, as FSDP lays them out) and one by one.
    sizes = (4099, 1000, 65536)
    for dtype in (torch.float32, torch.bfloat16):
        seed += 1
        grads = [inputs(rank, dtype, s * world, seed * 7 + i) for i, s in enumerate(sizes)]
        separate = []
        for g in grads:
            out = torch.empty(g.numel() // world, dtype=dtype, device="cuda")
            dist.reduce_scatter_tensor(out, g.cuda(), op=dist.ReduceOp.AVG)
            separate.append(out)
        flat = torch.cat([torch.cat([g.view(world, -1)[r] for g in grads]) for r in range(world)])
        out = torch.empty(flat.numel() // world, dtype=dtype, device="cuda")
        dist.reduce_scatter_tensor(out, flat.cuda(), op=dist.ReduceOp.AVG)
        result["bucketing_variant"] += differ(out, torch.cat(separate))
    torch.cuda.synchronize()
    result["total_mismatch"] = sum(result["mismatch"].values())
    return result


def import_fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def run_fsdp(rank, world, config, steps):
    from torch.distributed.device_mesh import init_device_mesh
    fully_shard = import_fully_shard()
    torch.use_deterministic_algorithms(True)
    mesh = init_device_mesh("cuda", (world,))
    torch.manual_seed(1234)
    layers = [torch.nn.Linear(96, 160), torch.nn.GELU(), torch.nn.Linear(160, 160),
              torch.nn.GELU(), torch.nn.Linear(160, 96), torch.nn.GELU(),
              torch.nn.Linear(96, 10)]
    model = torch.nn.Sequential(*layers).cuda()
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    if config == "a":
        for m in linears:
            fully_shard(m, mesh=mesh, reshard_after_forward=True)
        fully_shard(model, mesh=mesh, reshard_after_forward=True)
        try:  # explicit prefetch (FSDPModule API, torch >= 2.6)
            for i, m in enumerate(linears):
                if i + 1 < len(linears):
                    m.set_modules_to_forward_prefetch([linears[i + 1]])
                if i > 0:
                    m.set_modules_to_backward_prefetch([linears[i - 1]])
        except AttributeError:
            pass
    else:
        fully_shard(model, mesh=mesh, reshard_after_forward=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(99 + rank)
    for _ in range(steps):
        x = torch.randn(64, 96, generator=g).cuda()
        y = torch.randint(0, 10, (64,), generator=g).cuda()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    digest = hashlib.sha256()
    for p in model.parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        digest.update(bits(full.detach().cpu().contiguous()).numpy().tobytes())
    torch.cuda.synchronize()
    return {"rank": rank, "config": config, "steps": steps, "digest": digest.hexdigest()}


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD"])
    # One GPU per rank when there are enough, else ranks share GPU 0 (NCCL_HOSTID).
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            init_method="tcp://127.0.0.1:%s" % os.environ["PORT"],
                            device_id=torch.device("cuda", rank % torch.cuda.device_count()))
    mode = os.environ.get("MODE", "collectives")
    try:
        if mode == "fsdp":
            result = run_fsdp(rank, world, os.environ.get("CONFIG", "a"),
                              int(os.environ.get("STEPS", "10")))
        else:
            result = run_collectives(rank, world)
    except Exception as error:  # reported, never hidden: the shell script fails on it
        result = {"rank": rank, "error": "%s: %s" % (type(error).__name__, error)}
    print(json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
