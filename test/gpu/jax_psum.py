# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""One process of a JAX multi-process psum, for test/gpu/loading.sh jax.

Every process drives GPU 0 (NCCL_HOSTID per process makes NCCL accept that), joins
jax.distributed, and psums float32 vectors whose exact result depends on the order of
the additions (wide exponents, mixed signs).  It checks the result bit for bit
against nccl-det's tree computed here in numpy (T(lo, m) = T(lo, p) + T(lo + p, m - p),
p the largest power of two below m), and prints one JSON line: rank, bit-exact
verdict, how many elements a left-to-right sum would get wrong (the data
discriminates), the libnccl objects mapped, and whether the drop-in is mapped.
Environment: RANK, WORLD, PORT.
"""
import json
import os

import numpy as np
from ndet_maps import mapped, nccl_det_libraries, tree


def inputs(rank, count):
    rng = np.random.default_rng(1234 + rank)
    mantissa = rng.standard_normal(count).astype(np.float32)
    exponent = rng.integers(-20, 20, count).astype(np.float32)
    return (mantissa * np.exp2(exponent)).astype(np.float32)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD"])
    import jax

    jax.distributed.initialize("127.0.0.1:%s" % os.environ["PORT"], num_processes=world,
                               process_id=rank)
    import jax.numpy as jnp

    psum = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")
    verdicts = []
    discriminating = 0
    for count in (1, 1000, 65537, 1 << 20):
        all_inputs = [inputs(r, count) for r in range(world)]
        result = np.asarray(psum(jnp.asarray(all_inputs[rank])[None]))[0]
        expected = tree(all_inputs, 0, world)
        sequential = all_inputs[0].copy()
        for r in range(1, world):
            sequential = (sequential + all_inputs[r]).astype(np.float32)
        verdicts.append(bool(np.array_equal(result.view(np.uint32), expected.view(np.uint32))))
        discriminating += int(np.count_nonzero(sequential.view(np.uint32) != expected.view(np.uint32)))
    print(json.dumps({"rank": rank, "bit_exact": all(verdicts), "per_size": verdicts,
                      "sequential_differs": discriminating, "libnccl": mapped("libnccl"),
                      "dropin_mapped": any("libnccl.so" in path for path in nccl_det_libraries())}),
          flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
