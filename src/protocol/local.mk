# Pure decisions and interfaces, the same on every rank for the same facts: the setup
# record and table verdict, teardown decisions, the all-reduce decision, launch
# planning, the multi-host schedule, the pool layout, the host order, and the engine
# interface the divert layer calls (the CUDA engine implements it; the CPU tests'
# host-only engine too).  No CUDA or NCCL call.
noinst_LTLIBRARIES += src/protocol/libndet_protocol.la
src_protocol_libndet_protocol_la_SOURCES = \
	src/protocol/ndet_setup_record.c src/protocol/ndet_setup_record.h \
	src/protocol/ndet_host_table.c src/protocol/ndet_host_table.h \
	src/protocol/ndet_setup.c src/protocol/ndet_setup.h \
	src/protocol/ndet_teardown.c src/protocol/ndet_teardown.h \
	src/protocol/ndet_eligibility.c src/protocol/ndet_eligibility.h \
	src/protocol/ndet_plan.c src/protocol/ndet_plan.h \
	src/protocol/ndet_pool_layout.c src/protocol/ndet_pool_layout.h \
	src/protocol/ndet_host_order.c src/protocol/ndet_host_order.h \
	src/protocol/ndet_hosts_plan.c src/protocol/ndet_hosts_plan.h \
	src/protocol/ndet_engine_config.c src/protocol/ndet_engine_config.h \
	src/protocol/ndet_backend.h
