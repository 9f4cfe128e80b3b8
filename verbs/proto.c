// SPDX-License-Identifier: MIT
/*
 * Handshake encodings (REQ / REP private data, the hellos on the QP),
 * reject codes and inbox ring checks: pure byte handling, no verbs, so
 * every rule here is unit-tested on the host. The MACs are in auth.c.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "locus_err_priv.h"
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

static bool all_zero(const uint8_t *b, size_t n)
{
	uint8_t acc = 0;

	for (size_t i = 0; i < n; i++)
		acc |= b[i];
	return acc == 0;
}

size_t locus_verbs_pdata_encode(const struct locus_verbs_pdata *p, uint8_t *buf)
{
	size_t mac_len = p->kind == LOCUS_VERBS_PD_REQ ? LOCUS_VERBS_REQ_MAC_LEN : LOCUS_VERBS_MAC_LEN;

	memset(buf, 0, LOCUS_VERBS_PDATA_MAX);
	put16(buf + 0, p->version);
	buf[2] = p->kind;
	put32(buf + 4, p->cluster_id);
	put16(buf + 8, p->from);
	put16(buf + 10, p->to);
	memcpy(buf + 16, p->nonce, LOCUS_VERBS_NONCE_LEN);
	memcpy(buf + 32, p->mac, mac_len);
	return 32 + mac_len;
}

int locus_verbs_pdata_decode(const void *buf, size_t len, unsigned kind,
			     struct locus_verbs_pdata *p, struct locus_error *err)
{
	size_t need = kind == LOCUS_VERBS_PD_REQ ? LOCUS_VERBS_REQ_LEN : LOCUS_VERBS_REP_LEN;
	const uint8_t *b = buf;

	if (kind != LOCUS_VERBS_PD_REQ && kind != LOCUS_VERBS_PD_REP)
		return locus_error_set(err, EINVAL, "private data kind %u is neither REQ nor REP", kind);
	/* rdma_cm pads private data up to the transport's size: extra bytes are ignored */
	if (!buf || len < need)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "connection private data is %zu bytes, need %zu",
				       buf ? len : 0, need);
	memset(p, 0, sizeof(*p));
	p->version = get16(b + 0);
	p->kind = b[2];
	p->cluster_id = get32(b + 4);
	p->from = get16(b + 8);
	p->to = get16(b + 10);
	memcpy(p->nonce, b + 16, LOCUS_VERBS_NONCE_LEN);
	memcpy(p->mac, b + 32, need - 32);
	/* the version first: a peer of another version may lay out the rest otherwise */
	if (p->version != LOCUS_VERBS_PROTO_VERSION)
		return locus_error_set(err, LOCUS_EVERSION, "peer speaks protocol version %u, we speak %u",
				       p->version, LOCUS_VERBS_PROTO_VERSION);
	if (p->kind != kind)
		return locus_error_set(err, LOCUS_EPROTO, "private data kind %u, expected %u",
				       p->kind, kind);
	if (b[3] || !all_zero(b + 12, 4))
		return locus_error_set(err, LOCUS_EPROTO, "private data: reserved bytes not zero");
	return 0;
}

void locus_verbs_hello_encode(const struct locus_verbs_hello *h, uint8_t *buf)
{
	memset(buf, 0, LOCUS_VERBS_HELLO_LEN);
	put16(buf + 0, h->version);
	buf[2] = h->kind;
	buf[3] = h->slot_shift;
	put16(buf + 4, h->from);
	put16(buf + 6, h->slot_count);
	put32(buf + 8, h->rkey);
	put64(buf + 16, h->inbox_addr);
	memcpy(buf + 24, h->mac, LOCUS_VERBS_MAC_LEN);
}

int locus_verbs_hello_decode(const void *buf, size_t len, unsigned kind,
			     struct locus_verbs_hello *h, struct locus_error *err)
{
	const uint8_t *b = buf;
	uint64_t span;

	if (!buf || len != LOCUS_VERBS_HELLO_LEN)
		return locus_error_set(err, LOCUS_ETRUNCATED, "hello is %zu bytes, want %u",
				       buf ? len : 0, LOCUS_VERBS_HELLO_LEN);
	h->version = get16(b + 0);
	h->kind = b[2];
	h->slot_shift = b[3];
	h->from = get16(b + 4);
	h->slot_count = get16(b + 6);
	h->rkey = get32(b + 8);
	h->inbox_addr = get64(b + 16);
	memcpy(h->mac, b + 24, LOCUS_VERBS_MAC_LEN);
	if (h->version != LOCUS_VERBS_PROTO_VERSION)
		return locus_error_set(err, LOCUS_EVERSION, "hello of protocol version %u, we speak %u",
				       h->version, LOCUS_VERBS_PROTO_VERSION);
	if (h->kind != kind)
		return locus_error_set(err, LOCUS_EPROTO, "hello kind %u, expected %u", h->kind, kind);
	if (!all_zero(b + 12, 4))
		return locus_error_set(err, LOCUS_EPROTO, "hello: reserved bytes not zero");
	if (h->slot_shift < LOCUS_VERBS_SLOT_SHIFT_MIN || h->slot_shift > LOCUS_VERBS_SLOT_SHIFT_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "slot shift %u outside [%u, %u]",
				       h->slot_shift, LOCUS_VERBS_SLOT_SHIFT_MIN,
				       LOCUS_VERBS_SLOT_SHIFT_MAX);
	if (h->slot_count < LOCUS_VERBS_SLOTS_MIN || h->slot_count > LOCUS_VERBS_SLOTS_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "slot count %u outside [%u, %u]",
				       h->slot_count, LOCUS_VERBS_SLOTS_MIN, LOCUS_VERBS_SLOTS_MAX);
	span = ((uint64_t)h->slot_count << h->slot_shift) + LOCUS_VERBS_CTRL_LEN;
	if (h->inbox_addr == 0 || h->inbox_addr + span < h->inbox_addr)
		return locus_error_set(err, LOCUS_ERANGE,
				       "inbox at 0x%llx + %llu bytes is not a valid range",
				       (unsigned long long)h->inbox_addr, (unsigned long long)span);
	return 0;
}

int locus_verbs_reject_errno(int reason)
{
	switch (reason) {
	case LOCUS_VERBS_REJ_VERSION:
		return -LOCUS_EVERSION;
	case LOCUS_VERBS_REJ_AUTH:
	case LOCUS_VERBS_REJ_CLUSTER:
	case LOCUS_VERBS_REJ_REPLAY:
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
