// SPDX-License-Identifier: MIT
/*
 * Connection private data and inbox ring checks: pure byte handling, no
 * verbs, so every rule here is unit-tested on the host.
 */
#include <errno.h>
#include <string.h>

#include "locus_verbs.h"

static void put16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *b, uint32_t v)
{
	put16(b, (uint16_t)v);
	put16(b + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *b, uint64_t v)
{
	put32(b, (uint32_t)v);
	put32(b + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *b)
{
	return (uint16_t)(b[0] | (b[1] << 8));
}

static uint32_t get32(const uint8_t *b)
{
	return get16(b) | ((uint32_t)get16(b + 2) << 16);
}

static uint64_t get64(const uint8_t *b)
{
	return get32(b) | ((uint64_t)get32(b + 4) << 32);
}

void locus_verbs_pdata_encode(const struct locus_verbs_pdata *p, uint8_t *buf)
{
	put16(buf + 0, p->version);
	buf[2] = p->kind;
	buf[3] = p->slot_shift;
	put32(buf + 4, p->cluster_id);
	put16(buf + 8, p->node_id);
	put16(buf + 10, p->slot_count);
	put32(buf + 12, p->rkey);
	put64(buf + 16, p->inbox_addr);
	memcpy(buf + 24, p->secret, LOCUS_VERBS_SECRET_LEN);
}

int locus_verbs_pdata_decode(const void *buf, size_t len, struct locus_verbs_pdata *p,
			     struct locus_error *err)
{
	const uint8_t *b = buf;
	uint64_t span;

	/* rdma_cm may pad private data up to the transport's size: extra bytes are ignored. */
	if (!buf || len < LOCUS_VERBS_PDATA_LEN)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "connection private data is %zu bytes, need %u",
				       buf ? len : 0, LOCUS_VERBS_PDATA_LEN);
	p->version = get16(b + 0);
	p->kind = b[2];
	p->slot_shift = b[3];
	p->cluster_id = get32(b + 4);
	p->node_id = get16(b + 8);
	p->slot_count = get16(b + 10);
	p->rkey = get32(b + 12);
	p->inbox_addr = get64(b + 16);
	memcpy(p->secret, b + 24, LOCUS_VERBS_SECRET_LEN);

	if (p->version != LOCUS_VERBS_PROTO_VERSION)
		return locus_error_set(err, LOCUS_EVERSION, "peer speaks protocol version %u, we speak %u",
				       p->version, LOCUS_VERBS_PROTO_VERSION);
	if (p->kind != LOCUS_VERBS_PD_REQ && p->kind != LOCUS_VERBS_PD_REP)
		return locus_error_set(err, LOCUS_EPROTO, "private data kind %u is neither REQ nor REP",
				       p->kind);
	if (p->slot_shift < LOCUS_VERBS_SLOT_SHIFT_MIN || p->slot_shift > LOCUS_VERBS_SLOT_SHIFT_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "slot shift %u outside [%u, %u]",
				       p->slot_shift, LOCUS_VERBS_SLOT_SHIFT_MIN,
				       LOCUS_VERBS_SLOT_SHIFT_MAX);
	if (p->slot_count < LOCUS_VERBS_SLOTS_MIN || p->slot_count > LOCUS_VERBS_SLOTS_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "slot count %u outside [%u, %u]",
				       p->slot_count, LOCUS_VERBS_SLOTS_MIN, LOCUS_VERBS_SLOTS_MAX);
	span = ((uint64_t)p->slot_count << p->slot_shift) + LOCUS_VERBS_CTRL_LEN;
	if (p->inbox_addr == 0 || p->inbox_addr + span < p->inbox_addr)
		return locus_error_set(err, LOCUS_ERANGE,
				       "inbox at 0x%llx + %llu bytes is not a valid range",
				       (unsigned long long)p->inbox_addr, (unsigned long long)span);
	return 0;
}

int locus_verbs_ct_equal(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t acc = 0;
	size_t i;

	for (i = 0; i < n; i++)
		acc |= x[i] ^ y[i];
	return acc == 0;
}

int locus_verbs_pdata_admit(const struct locus_verbs_pdata *p, uint32_t cluster_id,
			    const uint8_t secret[LOCUS_VERBS_SECRET_LEN],
			    enum locus_verbs_pdata_kind kind, struct locus_error *err)
{
	/* Compare the secret first and always, so timing does not tell a wrong cluster. */
	int ok = locus_verbs_ct_equal(p->secret, secret, LOCUS_VERBS_SECRET_LEN);

	if (p->cluster_id != cluster_id)
		return locus_error_set(err, LOCUS_EAUTH, "node %u belongs to cluster %u, we are %u",
				       p->node_id, p->cluster_id, cluster_id);
	if (!ok)
		return locus_error_set(err, LOCUS_EAUTH, "node %u presented a wrong cluster secret",
				       p->node_id);
	if (p->kind != kind)
		return locus_error_set(err, LOCUS_EPROTO, "expected private data kind %u, got %u",
				       kind, p->kind);
	return 0;
}

int locus_verbs_reject_errno(int reason)
{
	switch (reason) {
	case LOCUS_VERBS_REJ_VERSION:
		return -LOCUS_EVERSION;
	case LOCUS_VERBS_REJ_AUTH:
	case LOCUS_VERBS_REJ_CLUSTER:
		return -LOCUS_EAUTH;
	case LOCUS_VERBS_REJ_PEER:
	case LOCUS_VERBS_REJ_INVALID:
		return -LOCUS_EPROTO;
	case LOCUS_VERBS_REJ_BUSY:
		return -EBUSY;
	default:
		return -ECONNREFUSED;
	}
}

int locus_verbs_ring_accept(const struct locus_verbs_ring *r, uint64_t head, uint32_t imm,
			    uint32_t byte_len, uint32_t *index, uint32_t *n, uint32_t *consumed)
{
	uint32_t idx = imm & 0xffff, cnt = (imm >> 16) + 1;
	uint32_t pos = (uint32_t)(head % r->slot_count);
	uint64_t cap;

	if (cnt > r->slot_count / 2 || idx >= r->slot_count || idx + cnt > r->slot_count)
		return -LOCUS_EPROTO;
	cap = (uint64_t)cnt << r->slot_shift;
	/* byte_len must need exactly cnt slots: 1 byte .. cnt * slot_size */
	if (byte_len == 0 || byte_len > cap || byte_len <= cap - (1ull << r->slot_shift))
		return -LOCUS_EPROTO;
	if (idx == pos) {
		*consumed = cnt;
	} else if (idx == 0 && pos + cnt > r->slot_count) {
		/* the sender skipped the tail, which only happens when it must */
		*consumed = r->slot_count - pos + cnt;
	} else {
		return -LOCUS_EPROTO;
	}
	*index = idx;
	*n = cnt;
	return 0;
}
