# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""One rank of an all-reduce through NCCL loaded the way vLLM's pynccl loads it.

ctypes.CDLL(VLLM_NCCL_SO_PATH) + attribute lookup (dlsym on that handle), after
PyTorch has loaded its own libnccl.  The drop-in must find that already-loaded NCCL
(no second real NCCL mapped), set the communicator up, divert the float all-reduce
(ncclDetCommQuery) and give nccl-det's tree bit for bit.  Prints one JSON line.
Environment: RANK, WORLD, PORT, VLLM_NCCL_SO_PATH.
"""
import ctypes
import json
import os

import numpy as np
from ndet_maps import mapped, tree
import torch
import torch.distributed as dist


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def inputs(rank, count):
    rng = np.random.default_rng(4321 + rank)
    return (rng.standard_normal(count) * np.exp2(rng.integers(-20, 20, count))).astype(np.float32)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD"])
    torch.cuda.set_device(0)
    # gloo only carries the unique id: every NCCL call below goes through ctypes.
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            init_method="tcp://127.0.0.1:%s" % os.environ["PORT"])
    from torch.distributed import distributed_c10d  # noqa: F401  (torch's libnccl is loaded now)
    nccl = ctypes.CDLL(os.environ["VLLM_NCCL_SO_PATH"])
    unique = UniqueId()
    if rank == 0:
        assert nccl.ncclGetUniqueId(ctypes.byref(unique)) == 0
    holder = [bytes(unique.internal)]
    dist.broadcast_object_list(holder, src=0)
    ctypes.memmove(ctypes.byref(unique), holder[0], 128)
    comm = ctypes.c_void_p()
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId,
                                      ctypes.c_int]
    assert nccl.ncclCommInitRank(ctypes.byref(comm), world, unique, rank) == 0
    nccl.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    exact = []
    for count in (1, 4097, 1 << 20):
        data = torch.from_numpy(inputs(rank, count)).cuda()
        stream = torch.cuda.current_stream().cuda_stream
        # ncclFloat32 = 7, ncclSum = 0
        assert nccl.ncclAllReduce(data.data_ptr(), data.data_ptr(), count, 7, 0, comm,
                                  ctypes.c_void_p(stream)) == 0
        torch.cuda.synchronize()
        expected = tree([inputs(r, count) for r in range(world)], 0, world)
        exact.append(bool(np.array_equal(data.cpu().numpy().view(np.uint32),
                                         expected.view(np.uint32))))
    diverted = ctypes.c_int(-1)
    reason = ctypes.c_char_p()
    query = nccl.ncclDetCommQuery
    query.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_char_p)]
    assert query(comm, ctypes.byref(diverted), ctypes.byref(reason)) == 0
    libs = mapped("libnccl")
    print(json.dumps({"rank": rank, "bit_exact": all(exact), "diverted": diverted.value,
                      "reason": (reason.value or b"").decode(), "libnccl": libs}), flush=True)
    assert nccl.ncclCommFinalize(comm) == 0
    assert nccl.ncclCommDestroy(comm) == 0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
