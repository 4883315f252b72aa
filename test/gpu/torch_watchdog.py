# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""One rank of a PyTorch job whose last rank is SIGKILLed during an all_reduce.

Run by test/gpu/faults.sh under LD_PRELOAD=libnccl-det.so with a short NCCL_DET_TIMEOUT,
TORCH_NCCL_ASYNC_ERROR_HANDLING set and a process-group timeout far above it (600 s):
only PyTorch's watchdog, told by ncclCommGetAsyncError (nccl-det's ncclRemoteError), can
end the survivors, which wait in a sleep loop after issuing their all_reduce.
Environment: RANK, WORLD, PORT, LIMIT (seconds a survivor waits before it gives up).
Prints "CALLED <time.time()>" when the all_reduce is issued, and "ALIVE" (exit 3) if
the process is still alive LIMIT seconds later.
"""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD"])
    limit = float(os.environ.get("LIMIT", "60"))
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            init_method="tcp://127.0.0.1:%s" % os.environ["PORT"],
                            timeout=datetime.timedelta(seconds=600))
    print("rank %d: torch %s, NCCL %s, TORCH_NCCL_ASYNC_ERROR_HANDLING=%s" % (
        rank, torch.__version__, torch.cuda.nccl.version(),
        os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")), flush=True)
    # One call that works: the communicator exists and nccl-det set it up.
    warm = torch.full((1 << 16,), float(rank + 1), device="cuda")
    dist.all_reduce(warm)
    torch.cuda.synchronize()
    want = world * (world + 1) / 2
    if not bool((warm == want).all()):
        print("FAIL rank %d: warm-up all_reduce gave %r, want %r" % (rank, warm[0].item(), want),
              flush=True)
        sys.exit(1)
    if rank == world - 1:
        time.sleep(1)  # the survivors are inside their all_reduce by then
        os.kill(os.getpid(), signal.SIGKILL)
    data = torch.ones(1 << 26, device="cuda")
    print("CALLED %.3f" % time.time(), flush=True)
    work = dist.all_reduce(data, async_op=True)  # noqa: F841 (the watchdog tracks it)
    start = time.time()
    while time.time() - start < limit:
        time.sleep(0.1)
    print("ALIVE rank %d: %.0f s after the all_reduce the watchdog has not ended this process"
          % (rank, limit), flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
