// SPDX-License-Identifier: MIT
/*
 * Client side of ELDR routing (locus_client.h): a prefiller's ROUTE built
 * from the prompt's routed experts, and the SIGNATURE_IN a decoder reads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock_priv.h"
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

#define NARROW_STACK 4096 /* ids narrowed on the stack; more are malloc'ed */
#define POLL_NAP_NS  20000

/* Size in bytes of an enum locus_ids_type element, 0 for an unknown type. */
static size_t ids_size(uint32_t type)
{
	switch (type) {
	case LOCUS_IDS_U8: case LOCUS_IDS_I8: return 1;
	case LOCUS_IDS_U16: case LOCUS_IDS_I16: return 2;
	case LOCUS_IDS_U32: case LOCUS_IDS_I32: return 4;
	case LOCUS_IDS_U64: case LOCUS_IDS_I64: return 8;
	default: return 0;
	}
}

/*
 * Copy n ids of type into out as uint16, each checked below n_experts.
 * 0, or -1 with the index of the first bad one in *bad and its value in
 * *sv (signed types) or *uv (unsigned).
 */
#define NARROW(T, NEG)							\
	for (size_t i = 0; i < n; i++) {					\
		T v = ((const T *)ids)[i];					\
		if (unlikely(NEG || (uint64_t)v >= n_experts)) {	\
			*bad = i;						\
			*sv = (int64_t)v;					\
			*uv = (uint64_t)v;					\
			return -1;						\
		}							\
		out[i] = (uint16_t)v;						\
	}									\
	return 0

static int narrow(uint16_t *out, const void *ids, uint32_t type, size_t n, uint32_t n_experts,
		  size_t *bad, int64_t *sv, uint64_t *uv)
{
	switch (type) {
	case LOCUS_IDS_U8: { NARROW(uint8_t, 0); }
	case LOCUS_IDS_I8: { NARROW(int8_t, v < 0); }
	case LOCUS_IDS_U16: { NARROW(uint16_t, 0); }
	case LOCUS_IDS_I16: { NARROW(int16_t, v < 0); }
	case LOCUS_IDS_U32: { NARROW(uint32_t, 0); }
	case LOCUS_IDS_I32: { NARROW(int32_t, v < 0); }
	case LOCUS_IDS_U64: { NARROW(uint64_t, 0); }
	default: { NARROW(int64_t, v < 0); }
	}
}

int locus_client_route_typed(struct locus_client *c, uint64_t off,
			     const struct locus_client_route_typed_req *r, uint64_t id,
			     struct locus_error *err)
{
	uint16_t stack[NARROW_STACK], *ids = stack;
	struct locus_client_route_req q;
	size_t n, bad;
	int64_t sv;
	uint64_t uv;
	int ret;

	if (!r || !r->ids || r->reserved || !ids_size(r->ids_type))
		return locus_error_set(err, EINVAL, "route: no request, or ids of unknown type %u",
				       r ? r->ids_type : 0);
	if (!r->n_tokens || !r->n_layers || r->n_layers > LOCUS_ELDR_MAX_LAYERS ||
	    !r->n_experts || r->n_experts > LOCUS_ELDR_MAX_EXPERTS || !r->k ||
	    r->k > LOCUS_ELDR_MAX_K)
		return locus_error_set(err, LOCUS_ERANGE, "routed experts of %u tokens x %u layers "
				       "x k = %u for %u experts: out of range", r->n_tokens,
				       r->n_layers, r->k, r->n_experts);
	n = (size_t)r->n_tokens * r->n_layers * r->k;
	if (n > NARROW_STACK && !(ids = malloc(n * sizeof(*ids))))
		return locus_error_set(err, ENOMEM, "route: no memory for %zu expert ids", n);
	if (narrow(ids, r->ids, r->ids_type, n, r->n_experts, &bad, &sv, &uv) < 0) {
		size_t tl = bad / r->k, tok = tl / r->n_layers, layer = tl % r->n_layers;
		char v[24];

		if (r->ids_type % 2 == 0) /* the signed types */
			snprintf(v, sizeof(v), "%lld", (long long)sv);
		else
			snprintf(v, sizeof(v), "%llu", (unsigned long long)uv);
		ret = locus_error_set(err, LOCUS_ERANGE, "expert id %s at token %zu, layer %zu, "
				      "slot %zu is out of range: the ELDR table in use has %u "
				      "experts (ids 0..%u)", v, tok, layer, bad % r->k,
				      r->n_experts, r->n_experts - 1u);
		goto out;
	}
	q = (struct locus_client_route_req){ .n_layers = r->n_layers, .n_experts = r->n_experts,
					     .k = r->k, .n_tokens = r->n_tokens, .ids = ids,
					     .allowed_decoders = r->allowed_decoders };
	ret = locus_client_route(c, off, &q, id, err);
out:
	if (ids != stack)
		free(ids);
	return ret;
}

int locus_client_poll_until(struct locus_client *c, struct locus_desc *out, uint32_t max,
			    uint8_t op, uint64_t id, uint64_t spin_ns, uint64_t timeout_ns)
{
	uint64_t t0 = locus_mono_ns(), now;
	uint32_t got = 0;

	if (!c || !out || !max)
		return -EINVAL;
	for (;;) {
		int n = locus_client_poll(c, out + got, max - got);

		if (n < 0)
			return got ? (int)got : n;
		for (int i = 0; i < n; i++)
			if (out[got + i].op == op && out[got + i].id == id)
				return (int)(got + (uint32_t)n);
		got += (uint32_t)n;
		if (got == max)
			return (int)got;
		if (n)
			continue;
		now = locus_mono_ns();
		if (now - t0 >= timeout_ns)
			return (int)got;
		if (now - t0 >= spin_ns) {
			struct timespec ts = { 0, POLL_NAP_NS };

			nanosleep(&ts, NULL);
		}
	}
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
