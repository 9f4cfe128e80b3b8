// SPDX-License-Identifier: MIT
/* Rail choice per (peer node, source rank): see locus_rails.h. */
#include <string.h>

#include "locus_rails.h"

/* The mod rule: local rank s over the rails shared with node (none: rail 0). */
static uint8_t mod_home(const struct locus_rails *r, uint32_t node, uint32_t s)
{
	return (uint8_t)(s % (r->common[node] ? r->common[node] : 1));
}

void locus_rails_init(struct locus_rails *r, const struct locus_config *cfg)
{
	memset(r, 0, sizeof(*r));
	r->n_nodes = cfg->n_nodes;
	r->gpus = cfg->gpus_per_node ? cfg->gpus_per_node : 1;
	for (uint32_t node = 0; node < cfg->n_nodes; node++) {
		r->common[node] = node == cfg->node_id ? 0 :
				  (uint8_t)locus_config_common_rails(cfg, cfg->node_id, node);
		for (uint32_t s = 0; s < LOCUS_CFG_MAX_GPUS; s++) {
			r->home[node][s] = mod_home(r, node, s);
			r->cur[node][s] = r->home[node][s];
		}
	}
}

void locus_rails_map(struct locus_rails *r, const uint8_t *gpu_rail, uint32_t n)
{
	for (uint32_t node = 0; node < r->n_nodes; node++)
		for (uint32_t s = 0; s < n && s < LOCUS_CFG_MAX_GPUS; s++) {
			/* the map's rail where node has it too */
			r->home[node][s] = gpu_rail[s] < r->common[node] ? gpu_rail[s] :
					   mod_home(r, node, s);
			r->cur[node][s] = r->home[node][s];
		}
}

int locus_rails_pick(struct locus_rails *r, uint32_t node, uint32_t src, uint32_t up_mask)
{
	uint32_t n = r->common[node], cur = r->cur[node][src], home;

	if (up_mask & 1u << cur && (r->pending[node][src] || cur == locus_rails_home(r, node, src)))
		return (int)cur;
	/*
	 * Nothing outstanding on the current rail, or it is down (everything on it
	 * ended first): home if it is up, else the next rail up after home.
	 */
	home = locus_rails_home(r, node, src);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k = (home + i) % n;

		if (up_mask & 1u << k) {
			if (k != cur) {
				r->cur[node][src] = (uint8_t)k;
				r->moves++;
			}
			return (int)k;
		}
	}
	return -1;
}
