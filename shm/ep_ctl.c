// SPDX-License-Identifier: MIT
/*
 * The EP group's pure parts (locus_ep.h): the control row a rank sends
 * another (EMPTY, ABORT), its check on arrival, and the order received rows
 * are handed over in. No client, no I/O.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "locus_ep.h"
#include "locus_err_priv.h"

void locus_ep_ctl_build(struct locus_ep_ctl *c, uint32_t kind, uint32_t src_rank,
			uint32_t n_ranks, uint64_t batch, int32_t code, uint32_t n_tokens,
			const char *reason)
{
	memset(c, 0, sizeof(*c));
	c->magic = LOCUS_EP_CTL_MAGIC;
	c->kind = (uint16_t)kind;
	c->n_ranks = (uint16_t)n_ranks;
	c->src_rank = src_rank;
	c->code = code;
	c->batch = batch & LOCUS_EP_BATCH_MAX;
	c->n_tokens = n_tokens;
	if (!reason)
		return;
	for (size_t i = 0; i + 1 < sizeof(c->reason) && reason[i]; i++)
		c->reason[i] = reason[i] >= 0x20 && reason[i] < 0x7f ? reason[i] : '?';
}

/* An errno (below LOCUS_E_BASE) or one of ours, negated. */
static int code_known(int32_t code)
{
	int32_t v = -code;

	if (code >= 0 || code == INT32_MIN)
		return 0;
	return v < LOCUS_E_BASE || (v > LOCUS_E_BASE && v < LOCUS_E_END);
}

int locus_ep_ctl_check(const struct locus_ep_ctl *c, uint32_t row_bytes, uint64_t id,
		       uint32_t src, uint32_t n_ranks, struct locus_error *err)
{
	size_t n;

	if (row_bytes != sizeof(*c) || c->magic != LOCUS_EP_CTL_MAGIC)
		return locus_error_set(err, LOCUS_EPROTO, "control row of %u bytes from rank %u: "
				       "not a %zu-byte locus_ep_ctl", row_bytes, src, sizeof(*c));
	if (c->kind != LOCUS_EP_CTL_EMPTY && c->kind != LOCUS_EP_CTL_ABORT)
		return locus_error_set(err, LOCUS_EPROTO, "control row of kind %u from rank %u",
				       c->kind, src);
	if (!locus_ep_ctl_is(id) || id != locus_ep_ctl_id(c->kind, c->batch) ||
	    c->batch == 0 || c->batch > LOCUS_EP_BATCH_MAX)
		return locus_error_set(err, LOCUS_EPROTO, "control row from rank %u: batch %llu "
				       "under id 0x%llx", src, (unsigned long long)c->batch,
				       (unsigned long long)id);
	if (c->src_rank != src || c->n_ranks != n_ranks || src >= n_ranks || c->reserved)
		return locus_error_set(err, LOCUS_EPROTO, "control row from rank %u names rank %u "
				       "of %u (our group: %u ranks)", src, c->src_rank, c->n_ranks,
				       n_ranks);
	if (c->kind == LOCUS_EP_CTL_EMPTY ? c->code != 0 : !code_known(c->code))
		return locus_error_set(err, LOCUS_EPROTO, "control row of kind %u from rank %u "
				       "with code %d", c->kind, src, c->code);
	n = strnlen(c->reason, sizeof(c->reason));
	if (n == sizeof(c->reason))
		return locus_error_set(err, LOCUS_EPROTO, "control row from rank %u: reason not "
				       "terminated", src);
	for (size_t i = 0; i < n; i++)
		if (c->reason[i] < 0x20 || c->reason[i] >= 0x7f)
			return locus_error_set(err, LOCUS_EPROTO, "control row from rank %u: byte "
					       "0x%02x in its reason", src,
					       (unsigned)(uint8_t)c->reason[i]);
	return 0;
}

static int row_cmp(const void *a, const void *b)
{
	const struct locus_ep_row *x = a, *y = b;

	if (x->src != y->src)
		return x->src < y->src ? -1 : 1;
	if (x->token != y->token)
		return x->token < y->token ? -1 : 1;
	return 0;
}

void locus_ep_rows_sort(struct locus_ep_row *rows, size_t n)
{
	size_t i;

	/* sources' messages come in order, each by token, as a rule: one pass */
	for (i = 1; i < n && row_cmp(&rows[i - 1], &rows[i]) <= 0; i++)
		;
	if (i < n)
		qsort(rows, n, sizeof(*rows), row_cmp);
}
