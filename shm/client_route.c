// SPDX-License-Identifier: MIT
/*
 * Client side of ELDR routing (locus_client.h): a prefiller's ROUTE built
 * from the prompt's routed experts, and the SIGNATURE_IN a decoder reads.
 */
#include <errno.h>
#include <string.h>

#include "locus_client.h"
#include "locus_eldr.h"
#include "locus_err_priv.h"
#include "locus_wire.h"

int locus_client_route(struct locus_client *c, uint64_t off,
		       const struct locus_client_route_req *r, uint64_t id,
		       struct locus_error *err)
{
	uint64_t size;
	uint8_t *stage = locus_client_stage(c, &size);
	struct locus_desc d = { .op = LOCUS_OP_ROUTE, .id = id, .off = off };
	long len;

	if (!r || (!r->ids && r->n_tokens))
		return locus_error_set(err, EINVAL, "route: no request");
	if (!stage || off % 8 || off >= size)
		return locus_error_set(err, LOCUS_ERANGE, "stage offset %llu: not 8-byte aligned "
				       "or past the %llu-byte stage", (unsigned long long)off,
				       (unsigned long long)size);
	len = locus_eldr_sig_build(stage + off, size - off, r->n_layers, r->n_experts, r->k,
				   r->ids, r->n_tokens, r->allowed_decoders, err);
	if (len < 0)
		return (int)len;
	d.len = (uint32_t)len;
	if (locus_client_submit(c, &d, 1) != 1)
		return locus_error_set(err, LOCUS_EFULL, "submit ring full");
	return 0;
}

int locus_client_signature_in(struct locus_client *c, const struct locus_desc *d,
			      struct locus_client_signature *out, struct locus_error *err)
{
	const struct locus_msg_hdr *m;
	const struct locus_eldr_sig_hdr *h;

	if (!d || !out || d->op != LOCUS_OP_SIGNATURE_IN)
		return locus_error_set(err, EINVAL, "not a SIGNATURE_IN delivery");
	m = locus_client_inbox(c, d);
	if (!m)
		return locus_error_set(err, LOCUS_ERANGE, "SIGNATURE_IN of inbox slot %u: "
				       "%u bytes at %llu are not in the inbox", d->slot, d->len,
				       (unsigned long long)d->off);
	if (locus_msg_hdr_check(m, d->len, UINT32_MAX) < 0 || m->type != LOCUS_MSG_SIGNATURE ||
	    m->payload_len < sizeof(*h))
		return locus_error_set(err, LOCUS_EPROTO, "SIGNATURE_IN of inbox slot %u: not a "
				       "signature message", d->slot);
	h = (const struct locus_eldr_sig_hdr *)(m + 1);
	if (locus_eldr_sig_hdr_check(h, m->payload_len, h->n_layers, h->n_experts, err) < 0)
		return -LOCUS_EPROTO;
	*out = (struct locus_client_signature){
		.id = m->id,
		.slot = d->slot,
		.src_node = m->src_rank,
		.decoder_id = m->dst_rank,
		.n_layers = h->n_layers,
		.n_experts = h->n_experts,
		.prompt_tokens = h->prompt_tokens,
		.allowed_decoders = h->allowed_decoders,
		.sig = h,
		.sig_len = m->payload_len,
		.counts = locus_eldr_sig_counts(h),
	};
	return 0;
}
