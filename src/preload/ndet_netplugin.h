/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The net plugin (NCCL_NET_PLUGIN=det,<previous>: libnccl-net-det.so, a symlink to
 * libnccl-det.so).  It reports zero devices, so NCCL disables it and goes on to the
 * next plugin of the list (NCCL 2.27+ takes a comma list), then its internal IB and
 * socket transports: the user's network is untouched.  What it buys: NCCL keeps the
 * library loaded and, when NCCL_TUNER_PLUGIN is unset, takes the tuner from it (the
 * "mixed plugin" pattern of NCCL's plugins/mixed example), so one variable brings in
 * the tuner.  init never fails (it would only cost a log line, but there is no
 * reason to).
 *
 * Structs declared from NCCL's net_v10.h (2.27) and net_v11.h (2.28, 2.29); only
 * name, init, devices and finalize are ever called with zero devices, every other
 * slot holds a stub that fails, so that NCCL never calls through NULL.  Layouts are
 * checked by static_assert in ndet_netplugin.c.
 */
#ifndef NDET_NETPLUGIN_H_
#define NDET_NETPLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#include <nccl.h>

#include "preload/ndet_tuner.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The slots from accept to makeVDevice, the same in v10 and v11. */
#define NDET_NET_DATA_SLOTS                                                                        \
	ncclResult_t (*accept)(void *listenComm, void **recvComm, void **recvDevComm);             \
	ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);      \
	ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,                 \
				    uint64_t offset, int fd, void **mhandle);                      \
	ncclResult_t (*deregMr)(void *comm, void *mhandle);                                        \
	ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,     \
			      void *phandle, void **request);                                      \
	ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,        \
			      void **mhandles, void **phandles, void **request);                   \
	ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,    \
			       void **request);                                                    \
	ncclResult_t (*test)(void *request, int *done, int *sizes);                                \
	ncclResult_t (*closeSend)(void *sendComm);                                                 \
	ncclResult_t (*closeRecv)(void *recvComm);                                                 \
	ncclResult_t (*closeListen)(void *listenComm);                                             \
	ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);               \
	ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);                       \
	ncclResult_t (*makeVDevice)(int *d, void *props);

/* Pointer arguments whose types this plugin never reads are declared void *. */
typedef struct {
	const char *name;
	ncclResult_t (*init)(ndet_nccl_logger_t logFunction, void *profFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, void *props);
	ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(int dev, void *config, void *handle, void **sendComm,
				void **sendDevComm);
	NDET_NET_DATA_SLOTS
} ndet_net_v10_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **ctx, uint64_t commId, void *config,
			     ndet_nccl_logger_t logFunction, void *profFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, void *props);
	ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
				void **sendDevComm);
	NDET_NET_DATA_SLOTS
	ncclResult_t (*finalize)(void *ctx);
	ncclResult_t (*setNetAttr)(void *ctx, void *netAttr);
} ndet_net_v11_t;

#ifdef __cplusplus
}
#endif

#endif /* NDET_NETPLUGIN_H_ */
