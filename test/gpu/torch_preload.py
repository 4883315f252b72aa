# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""One rank of a PyTorch all_reduce job on GPU 0, for the preload transparency test.

Prints, as one JSON line: a hash of the all-reduce results, the libnccl path mapped in
this process, the runtime NCCL version (ncclGetVersion of that library), and whether
libnccl-det.so is mapped.  test/gpu/torch_preload.sh runs it with and without
LD_PRELOAD and compares.
Environment: RANK, WORLD, PORT (every rank on GPU 0, NCCL_HOSTID per process); or,
under torchrun, its RANK, WORLD_SIZE, LOCAL_RANK and rendezvous (rank r on GPU
LOCAL_RANK).
"""
import ctypes
import hashlib
import json
import os

import torch
import torch.distributed as dist
from ndet_maps import mapped, nccl_det_libraries




def main():
    if "LOCAL_RANK" in os.environ:  # torchrun
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        dist.init_process_group("nccl")
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD"])
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                init_method="tcp://127.0.0.1:%s" % os.environ["PORT"])
    digest = hashlib.sha256()
    generator = torch.Generator().manual_seed(1234 + rank)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32):
        for count in (1, 7, 1000, 65537, 1 << 20):
            data = (torch.randn(count, generator=generator) * 1000).to(dtype).cuda()
            dist.all_reduce(data)
            digest.update(data.cpu().view(torch.uint8).numpy().tobytes()
                          if dtype != torch.bfloat16 else data.cpu().view(torch.int16).numpy().tobytes())
    torch.cuda.synchronize()
    libs = mapped("libnccl.so")
    version = ctypes.c_int(0)
    if libs:
        ctypes.CDLL(libs[0]).ncclGetVersion(ctypes.byref(version))
    print(json.dumps({"rank": rank, "digest": digest.hexdigest(), "libnccl": libs,
                      "nccl_version": version.value,
                      "nccl_det_mapped": bool(nccl_det_libraries())}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
