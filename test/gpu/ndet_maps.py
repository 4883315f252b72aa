# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""What the GPU test scripts ask of this process's memory map."""
import ctypes


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
