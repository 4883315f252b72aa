/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The net plugin: zero devices, so NCCL falls through to the next one (see
 * ndet_netplugin.h).
 */
#include "config.h"

#include "preload/ndet_netplugin.h"

#include <assert.h>

#include "common/ndet_log.h"

#define NDET_EXPORT __attribute__((visibility("default")))

static_assert(sizeof(ndet_net_v10_t) == 20 * sizeof(void *), "ncclNet_v10_t");
static_assert(offsetof(ndet_net_v10_t, devices) == 2 * sizeof(void *), "ncclNet_v10_t.devices");
static_assert(offsetof(ndet_net_v10_t, makeVDevice) == 19 * sizeof(void *),
	      "ncclNet_v10_t.makeVDevice");
static_assert(sizeof(ndet_net_v11_t) == 22 * sizeof(void *), "ncclNet_v11_t");
static_assert(offsetof(ndet_net_v11_t, devices) == 2 * sizeof(void *), "ncclNet_v11_t.devices");
static_assert(offsetof(ndet_net_v11_t, finalize) == 20 * sizeof(void *), "ncclNet_v11_t.finalize");
static_assert(offsetof(ndet_net_v11_t, setNetAttr) == 21 * sizeof(void *),
	      "ncclNet_v11_t.setNetAttr");

#define NDET_NET_NAME "nccl-det"

/* NCCL 2.28+ calls init per communicator and wants a context back. */
static const char ndet_net_context = 'n';

static void ndet_net_announce(ndet_nccl_logger_t logger)
{
	if (logger != NULL)
		logger(NDET_NCCL_LOG_INFO, NDET_NCCL_LOG_TUNING, __FILE__, __LINE__,
		       "NCCL-DET net plugin: no devices of its own (the next NET plugin carries "
		       "the traffic); it only brings nccl-det's tuner");
	else
		NDET_INFO(NDET_SUBSYS_INIT, "net plugin: reporting no devices");
}

static ncclResult_t ndet_net_init_v10(ndet_nccl_logger_t logger, void *profiler)
{
	ndet_net_announce(logger);
	return ncclSuccess;
}

static ncclResult_t ndet_net_init_v11(void **context, uint64_t comm_id, void *config,
				      ndet_nccl_logger_t logger, void *profiler)
{
	ndet_net_announce(logger);
	if (context != NULL)
		*context = (void *)&ndet_net_context;
	return ncclSuccess;
}

/* NCCL disables a plugin with no device and moves on to the next. */
static ncclResult_t ndet_net_devices(int *ndev)
{
	if (ndev == NULL)
		return ncclInvalidArgument;
	*ndev = 0;
	return ncclSuccess;
}

static ncclResult_t ndet_net_finalize(void *context)
{
	return ncclSuccess;
}

/* The slots NCCL never calls on a plugin without devices: fail, never crash. */
static ncclResult_t ndet_net_get_properties(int dev, void *props)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_listen_v10(int dev, void *handle, void **listen_comm)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_listen_v11(void *context, int dev, void *handle, void **listen_comm)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_connect_v10(int dev, void *config, void *handle, void **send_comm,
					 void **send_dev_comm)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_connect_v11(void *context, int dev, void *handle, void **send_comm,
					 void **send_dev_comm)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_accept(void *listen_comm, void **recv_comm, void **recv_dev_comm)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
					   uint64_t offset, int fd, void **mhandle)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_dereg_mr(void *comm, void *mhandle)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
				   void *phandle, void **request)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
				   void **mhandles, void **phandles, void **request)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_iflush(void *recv_comm, int n, void **data, int *sizes,
				    void **mhandles, void **request)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_test(void *request, int *done, int *sizes)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_close(void *comm)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_get_device_mr(void *comm, void *mhandle, void **dptr_mhandle)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_irecv_consumed(void *recv_comm, int n, void *request)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_make_vdevice(int *d, void *props)
{
	return ncclInternalError;
}

static ncclResult_t ndet_net_set_net_attr(void *context, void *attributes)
{
	return ncclInternalError;
}

/* The stubs of NDET_NET_DATA_SLOTS. */
#define NDET_NET_DATA_STUBS                                                                        \
	.accept = ndet_net_accept, .regMr = ndet_net_reg_mr,                                       \
	.regMrDmaBuf = ndet_net_reg_mr_dmabuf, .deregMr = ndet_net_dereg_mr,                       \
	.isend = ndet_net_isend, .irecv = ndet_net_irecv, .iflush = ndet_net_iflush,               \
	.test = ndet_net_test, .closeSend = ndet_net_close, .closeRecv = ndet_net_close,           \
	.closeListen = ndet_net_close, .getDeviceMr = ndet_net_get_device_mr,                      \
	.irecvConsumed = ndet_net_irecv_consumed, .makeVDevice = ndet_net_make_vdevice

NDET_EXPORT const ndet_net_v10_t ncclNetPlugin_v10 = {
	.name = NDET_NET_NAME,
	.init = ndet_net_init_v10,
	.devices = ndet_net_devices,
	.getProperties = ndet_net_get_properties,
	.listen = ndet_net_listen_v10,
	.connect = ndet_net_connect_v10,
	NDET_NET_DATA_STUBS,
};

NDET_EXPORT const ndet_net_v11_t ncclNetPlugin_v11 = {
	.name = NDET_NET_NAME,
	.init = ndet_net_init_v11,
	.devices = ndet_net_devices,
	.getProperties = ndet_net_get_properties,
	.listen = ndet_net_listen_v11,
	.connect = ndet_net_connect_v11,
	NDET_NET_DATA_STUBS,
	.finalize = ndet_net_finalize,
	.setNetAttr = ndet_net_set_net_attr,
};
