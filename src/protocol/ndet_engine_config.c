/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * An engine configuration from the settings (see ndet_engine_config.h).
 */
#include "config.h"

#include "protocol/ndet_engine_config.h"

#include "common/ndet_settings.h"

void ndet_engine_config_from_settings(const struct ndet_settings *settings,
				      struct ndet_engine_config *config)
{
	config->pool_size = settings->pool_size;
	config->max_blocks = settings->max_blocks;
	config->oneshot_max = settings->oneshot_max;
	config->ll_max = settings->ll_max;
	config->ll_wide_min = settings->ll_wide_min;
	config->push_min = settings->push_min;
	config->hosts_staging = settings->hosts_staging;
	config->max_memory = settings->max_memory;
	config->settings_hash = ndet_settings_agreement_hash(settings);
}
