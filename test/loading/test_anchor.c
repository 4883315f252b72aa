/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * An empty shared object for test_dropin_search.sh: copied into a fake Python
 * package tree and loaded, it plays a framework's extension module.
 */
int ndet_test_anchor(void);

int ndet_test_anchor(void)
{
	return 1;
}
