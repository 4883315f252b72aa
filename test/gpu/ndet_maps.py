# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""What the GPU test scripts ask of this process's memory map, and the f32 tree."""
import ctypes

import numpy as np


def mapped(pattern):
    """Paths of the mapped files whose line in /proc/self/maps contains PATTERN."""
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if pattern in line and "/" in line})


def nccl_det_libraries():
    """Mapped libraries that are nccl-det (preload library, drop-in or plugin name):
    the ones exporting ncclDetGetVersion, whatever their file name."""
    found = []
    for path in mapped(".so"):
        try:
            library = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL | 4)  # RTLD_NOLOAD
        except OSError:
            continue
        if hasattr(library, "ncclDetGetVersion"):
            found.append(path)
    return found


def tree(values, lo, m):
    """nccl-det's tree over values[lo:lo+m] in f32 (left subtree: the largest power of
    two below m), for the numpy-based scripts."""
    if m == 1:
        return values[lo]
    p = 1
    while p * 2 < m:
        p *= 2
    return (tree(values, lo, p) + tree(values, lo + p, m - p)).astype(np.float32)
