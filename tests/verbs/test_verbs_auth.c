// SPDX-License-Identifier: MIT
/*
 * Host unit tests of the connection handshake (verbs/proto.c, verbs/auth.c):
 * the HMAC primitive against RFC 4231's vectors, every leg's MAC against an
 * independent computation (OpenSSL's one-shot HMAC() over the message laid
 * out here by hand from the documented format), the refusals of each leg
 * (wrong secret, tampered fields, another QP, swapped or reflected roles,
 * replays), and the REQ / REP / hello encodings: round trips, the wire
 * layout written out by hand, and every malformed encoding refused.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "locus_verbs.h"

static const uint8_t secret[LOCUS_VERBS_SECRET_LEN] = "locus-unit-test-secret-0123456!";

static void unhex(const char *h, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sscanf(h + 2 * i, "%2hhx", &out[i]);
}

/* ---- the primitive ------------------------------------------------------------------------- */

static void test_hmac_rfc4231(void **state)
{
	static uint8_t k1[20], k3[20], k4[25], k5[20], k6[131], d3[50], d4[50];
	static const char m6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
	static const char m7[] = "This is a test using a larger than block-size key and a larger "
				 "than block-size data. The key needs to be hashed before being "
				 "used by the HMAC algorithm.";
	const struct {
		const uint8_t *key;
		size_t key_len;
		const void *msg;
		size_t msg_len;
		const char *mac;
		size_t mac_len; /* case 5: truncated to 128 bits */
	} v[] = {
		{ k1, 20, "Hi There", 8,
		  "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32 },
		{ (const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28,
		  "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32 },
		{ k3, 20, d3, 50,
		  "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 32 },
		{ k4, 25, d4, 50,
		  "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 32 },
		{ k5, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b", 16 },
		{ k6, 131, m6, sizeof(m6) - 1,
		  "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32 },
		{ k6, 131, m7, sizeof(m7) - 1,
		  "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 32 },
	};
	(void)state;

	memset(k1, 0x0b, sizeof(k1));
	memset(k3, 0xaa, sizeof(k3));
	memset(d3, 0xdd, sizeof(d3));
	for (unsigned i = 0; i < sizeof(k4); i++)
		k4[i] = (uint8_t)(i + 1);
	memset(d4, 0xcd, sizeof(d4));
	memset(k5, 0x0c, sizeof(k5));
	memset(k6, 0xaa, sizeof(k6));
	for (unsigned i = 0; i < LOCUS_ARRAY_SIZE(v); i++) {
		uint8_t want[32], got[32];
		/* fed in three uneven pieces (one empty): the incremental path */
		size_t cut = v[i].msg_len / 3;
		struct locus_verbs_iov msg[] = {
			{ v[i].msg, cut },
			{ "", 0 },
			{ (const uint8_t *)v[i].msg + cut, v[i].msg_len - cut },
		};

		unhex(v[i].mac, want, v[i].mac_len);
		assert_int_equal(locus_verbs_hmac_sha256(v[i].key, v[i].key_len, msg, 3, got), 0);
		assert_memory_equal(got, want, v[i].mac_len);
	}
}

/* ---- every leg's MAC against an independent computation ------------------------------------ */

static struct locus_verbs_transcript sample_transcript(void)
{
	struct locus_verbs_transcript t = {
		.version = LOCUS_VERBS_PROTO_VERSION, .cluster_id = 0x11223344,
		.active_node = 3, .passive_node = 0x0506,
		.active_qpn = 0x00a1b2c3, .passive_qpn = 0x00d4e5f6,
	};

	for (unsigned i = 0; i < LOCUS_VERBS_NONCE_LEN; i++) {
		t.nonce_a[i] = (uint8_t)(0x10 + i);
		t.nonce_b[i] = (uint8_t)(0x80 + i);
	}
	return t;
}

/* The MAC's message as verbs/locus_verbs.h documents it, laid out byte by byte here. */
static void independent_mac(unsigned role, const struct locus_verbs_transcript *t, uint8_t out[32])
{
	uint8_t m[67], *b = m;
	unsigned int len = 0;
	bool req = role == LOCUS_VERBS_PD_REQ;

	memcpy(b, "locus-verbs-auth", 16);
	b += 16;
	*b++ = (uint8_t)role;
	*b++ = (uint8_t)t->version;
	*b++ = (uint8_t)(t->version >> 8);
	for (int i = 0; i < 4; i++)
		*b++ = (uint8_t)(t->cluster_id >> (8 * i));
	*b++ = (uint8_t)t->active_node;
	*b++ = (uint8_t)(t->active_node >> 8);
	*b++ = (uint8_t)t->passive_node;
	*b++ = (uint8_t)(t->passive_node >> 8);
	for (int i = 0; i < 4; i++)
		*b++ = (uint8_t)(t->active_qpn >> (8 * i));
	for (int i = 0; i < 4; i++)
		*b++ = req ? 0 : (uint8_t)(t->passive_qpn >> (8 * i));
	memcpy(b, t->nonce_a, 16);
	b += 16;
	if (req)
		memset(b, 0, 16);
	else
		memcpy(b, t->nonce_b, 16);
	b += 16;
	assert_int_equal(b - m, sizeof(m));
	assert_non_null(HMAC(EVP_sha256(), secret, sizeof(secret), m, sizeof(m), out, &len));
	assert_int_equal(len, 32);
}

static void test_mac_independent(void **state)
{
	struct locus_verbs_transcript t = sample_transcript();
	uint8_t got[32], want[32];
	(void)state;

	for (unsigned role = LOCUS_VERBS_PD_REQ; role <= LOCUS_VERBS_HELLO_P; role++) {
		assert_int_equal(locus_verbs_auth_mac(secret, role, &t, got), 0);
		independent_mac(role, &t, want);
		assert_memory_equal(got, want, 32);
	}
	/* the REQ's MAC is made before the passive side exists: its fields do not count */
	assert_int_equal(locus_verbs_auth_mac(secret, LOCUS_VERBS_PD_REQ, &t, want), 0);
	t.passive_qpn ^= 1;
	t.nonce_b[3] ^= 1;
	assert_int_equal(locus_verbs_auth_mac(secret, LOCUS_VERBS_PD_REQ, &t, got), 0);
	assert_memory_equal(got, want, 32);
	assert_int_equal(locus_verbs_auth_mac(secret, 0, &t, got), -EINVAL);
	assert_int_equal(locus_verbs_auth_mac(secret, 5, &t, got), -EINVAL);
}

/* Every field, role and secret bit a MAC covers changes it. */
static void test_mac_covers_everything(void **state)
{
	const struct locus_verbs_transcript base = sample_transcript();
	uint8_t mac[4][32], other[32];
	uint8_t wrong[LOCUS_VERBS_SECRET_LEN];
	(void)state;

	for (unsigned r = 0; r < 4; r++)
		assert_int_equal(locus_verbs_auth_mac(secret, r + 1, &base, mac[r]), 0);
	/* no leg's proof passes for another (a reflected or swapped proof) */
	for (unsigned a = 0; a < 4; a++)
		for (unsigned b = a + 1; b < 4; b++)
			assert_memory_not_equal(mac[a], mac[b], 32);
	memcpy(wrong, secret, sizeof(wrong));
	wrong[31] ^= 0x80;
	for (unsigned r = 0; r < 4; r++) {
		assert_int_equal(locus_verbs_auth_mac(wrong, r + 1, &base, other), 0);
		assert_memory_not_equal(other, mac[r], 32);
	}
	for (unsigned f = 0; f < 8; f++) {
		struct locus_verbs_transcript t = base;

		switch (f) {
		case 0: t.version++; break;
		case 1: t.cluster_id ^= 1u << 31; break;
		case 2: t.active_node++; break;
		case 3: t.passive_node++; break;
		case 4: t.active_qpn ^= 1; break;
		case 5: t.nonce_a[15] ^= 1; break;
		case 6: t.passive_qpn ^= 1; break;
		case 7: t.nonce_b[0] ^= 1; break;
		}
		/* the two the REQ cannot know (f 6, 7) change every other leg's */
		for (unsigned r = f >= 6 ? 1 : 0; r < 4; r++) {
			assert_int_equal(locus_verbs_auth_mac(secret, r + 1, &t, other), 0);
			assert_memory_not_equal(other, mac[r], 32);
		}
	}
}

static void test_mac_equal_and_nonce(void **state)
{
	uint8_t a[32] = { 0 }, b[32] = { 0 }, n1[16], n2[16];
	(void)state;

	assert_int_equal(locus_verbs_mac_equal(a, b, 32), 1);
	b[31] = 1; /* last byte differs */
	assert_int_equal(locus_verbs_mac_equal(a, b, 32), 0);
	assert_int_equal(locus_verbs_mac_equal(a, b, 31), 1);
	b[0] = 0x80;
	assert_int_equal(locus_verbs_mac_equal(a, b, 32), 0);
	assert_int_equal(locus_verbs_nonce(n1, sizeof(n1)), 0);
	assert_int_equal(locus_verbs_nonce(n2, sizeof(n2)), 0);
	assert_memory_not_equal(n1, n2, sizeof(n1));
	assert_memory_not_equal(n1, a, sizeof(n1));
}

/* ---- encodings ------------------------------------------------------------------------------- */

static struct locus_verbs_pdata sample_pdata(unsigned kind)
{
	struct locus_verbs_pdata p = {
		.version = LOCUS_VERBS_PROTO_VERSION, .kind = (uint8_t)kind,
		.cluster_id = 0x11223344, .from = 0x0506, .to = 0x0708,
	};

	for (unsigned i = 0; i < LOCUS_VERBS_NONCE_LEN; i++)
		p.nonce[i] = (uint8_t)(0x20 + i);
	for (unsigned i = 0; i < LOCUS_VERBS_MAC_LEN; i++)
		p.mac[i] = (uint8_t)(0x40 + i);
	if (kind == LOCUS_VERBS_PD_REQ)
		memset(p.mac + LOCUS_VERBS_REQ_MAC_LEN, 0, LOCUS_VERBS_MAC_LEN - LOCUS_VERBS_REQ_MAC_LEN);
	return p;
}

static void test_pdata_layout(void **state)
{
	/* the first 16 bytes written out by hand (little-endian, see locus_verbs.h) */
	static const uint8_t head[16] = { 0x04, 0x00, 0x01, 0x00, 0x44, 0x33, 0x22, 0x11,
					  0x06, 0x05, 0x08, 0x07, 0x00, 0x00, 0x00, 0x00 };
	uint8_t b[LOCUS_VERBS_PDATA_MAX];
	(void)state;

	/* what rdma_cm carries: 56 bytes of a REQ, 196 of a REP (rdma_connect(3), rdma_accept(3)) */
	assert_true(LOCUS_VERBS_REQ_LEN <= 56);
	assert_true(LOCUS_VERBS_REP_LEN <= 196);
	for (unsigned kind = LOCUS_VERBS_PD_REQ; kind <= LOCUS_VERBS_PD_REP; kind++) {
		struct locus_verbs_pdata p = sample_pdata(kind), q;
		size_t len = locus_verbs_pdata_encode(&p, b);

		assert_int_equal(len, kind == LOCUS_VERBS_PD_REQ ? 56 : 64);
		assert_int_equal(b[2], kind);
		assert_memory_equal(b, head, 2);
		assert_memory_equal(b + 3, head + 3, 13);
		assert_int_equal(b[16], 0x20);
		assert_int_equal(b[31], 0x20 + 15);
		assert_int_equal(b[32], 0x40);
		assert_int_equal(b[len - 1], 0x40 + len - 33);
		memset(&q, 0xee, sizeof(q));
		assert_int_equal(locus_verbs_pdata_decode(b, len, kind, &q, NULL), 0);
		assert_memory_equal(&p, &q, sizeof(p));
		/* rdma_cm pads to the transport's size: trailing bytes are ignored */
		assert_int_equal(locus_verbs_pdata_decode(b, sizeof(b), kind, &q, NULL), 0);
	}
}

static void test_pdata_malformed(void **state)
{
	struct locus_verbs_pdata q;
	struct locus_error err;
	uint8_t b[LOCUS_VERBS_PDATA_MAX + 8];
	(void)state;

	for (unsigned kind = LOCUS_VERBS_PD_REQ; kind <= LOCUS_VERBS_PD_REP; kind++) {
		struct locus_verbs_pdata p = sample_pdata(kind);
		size_t len = locus_verbs_pdata_encode(&p, b);
		unsigned other = kind == LOCUS_VERBS_PD_REQ ? LOCUS_VERBS_PD_REP : LOCUS_VERBS_PD_REQ;

		assert_int_equal(locus_verbs_pdata_decode(b, len - 1, kind, &q, &err),
				 -LOCUS_ETRUNCATED);
		assert_non_null(strstr(err.msg, "need"));
		assert_int_equal(locus_verbs_pdata_decode(NULL, 0, kind, &q, NULL), -LOCUS_ETRUNCATED);
		assert_int_equal(locus_verbs_pdata_decode(b, 0, kind, &q, NULL), -LOCUS_ETRUNCATED);
		/* the version: protocol 1 (the secret in clear) and anything else */
		for (unsigned v = 0; v < 4; v++) {
			if (v == LOCUS_VERBS_PROTO_VERSION)
				continue;
			b[0] = (uint8_t)v;
			assert_int_equal(locus_verbs_pdata_decode(b, len, kind, &q, &err),
					 -LOCUS_EVERSION);
		}
		b[0] = LOCUS_VERBS_PROTO_VERSION;
		b[1] = 1; /* version 0x0102 */
		assert_int_equal(locus_verbs_pdata_decode(b, len, kind, &q, NULL), -LOCUS_EVERSION);
		b[1] = 0;
		/* a message of the other kind, or of no kind */
		for (unsigned k = 0; k < 8; k++) {
			if (k == kind)
				continue;
			b[2] = (uint8_t)k;
			assert_int_equal(locus_verbs_pdata_decode(b, sizeof(b), kind, &q, &err),
					 -LOCUS_EPROTO);
		}
		b[2] = (uint8_t)kind;
		assert_int_equal(locus_verbs_pdata_decode(b, sizeof(b), other, &q, NULL),
				 -LOCUS_EPROTO);
		/* every reserved byte */
		for (unsigned off = 3; off < 16; off = off == 3 ? 12 : off + 1) {
			b[off] = 1;
			assert_int_equal(locus_verbs_pdata_decode(b, len, kind, &q, &err),
					 -LOCUS_EPROTO);
			assert_non_null(strstr(err.msg, "reserved"));
			b[off] = 0;
		}
		assert_int_equal(locus_verbs_pdata_decode(b, len, kind, &q, NULL), 0);
	}
	/* a REP's 64 bytes never pass for a 56-byte REQ's layout, nor the reverse */
	{
		struct locus_verbs_pdata p = sample_pdata(LOCUS_VERBS_PD_REQ);
		size_t len = locus_verbs_pdata_encode(&p, b);

		assert_int_equal(locus_verbs_pdata_decode(b, len, LOCUS_VERBS_PD_REP, &q, NULL),
				 -LOCUS_ETRUNCATED);
	}
	assert_int_equal(locus_verbs_pdata_decode(b, sizeof(b), LOCUS_VERBS_HELLO_A, &q, NULL),
			 -EINVAL);
}

static struct locus_verbs_hello sample_hello(void)
{
	struct locus_verbs_hello h = {
		.version = LOCUS_VERBS_PROTO_VERSION, .kind = LOCUS_VERBS_HELLO_A, .slot_shift = 14,
		.from = 0x0506, .slot_count = 256, .rkey = 0xa1b2c3d4,
		.inbox_addr = 0x00007f0012345000ull,
	};

	for (unsigned i = 0; i < LOCUS_VERBS_MAC_LEN; i++)
		h.mac[i] = (uint8_t)(0x60 + i);
	return h;
}

static void test_hello_encoding(void **state)
{
	static const uint8_t head[24] = {
		0x04, 0x00, 0x03, 0x0e, 0x06, 0x05, 0x00, 0x01, 0xd4, 0xc3, 0xb2, 0xa1,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x34, 0x12, 0x00, 0x7f, 0x00, 0x00,
	};
	struct locus_verbs_hello h = sample_hello(), q;
	struct locus_error err;
	uint8_t b[LOCUS_VERBS_HELLO_LEN + 1];
	(void)state;

	locus_verbs_hello_encode(&h, b);
	assert_memory_equal(b, head, sizeof(head));
	assert_int_equal(b[24], 0x60);
	assert_int_equal(b[55], 0x60 + 31);
	memset(&q, 0, sizeof(q));
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, NULL), 0);
	assert_memory_equal(&h, &q, sizeof(h));
	/* a SEND has no padding: exactly 56 bytes */
	assert_int_equal(locus_verbs_hello_decode(b, 55, LOCUS_VERBS_HELLO_A, &q, &err),
			 -LOCUS_ETRUNCATED);
	assert_non_null(strstr(err.msg, "55"));
	assert_int_equal(locus_verbs_hello_decode(b, 57, LOCUS_VERBS_HELLO_A, &q, NULL),
			 -LOCUS_ETRUNCATED);
	assert_int_equal(locus_verbs_hello_decode(NULL, 56, LOCUS_VERBS_HELLO_A, &q, NULL),
			 -LOCUS_ETRUNCATED);
	b[0] = 1;
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, NULL),
			 -LOCUS_EVERSION);
	b[0] = LOCUS_VERBS_PROTO_VERSION;
	/* the passive side's hello is not the active side's */
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_P, &q, &err),
			 -LOCUS_EPROTO);
	assert_non_null(strstr(err.msg, "kind"));
	for (unsigned off = 12; off < 16; off++) {
		b[off] = 0x10;
		assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, NULL),
				 -LOCUS_EPROTO);
		b[off] = 0;
	}
	b[3] = 5; /* slot shift below 6 */
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, &err),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "slot shift"));
	b[3] = 25;
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, NULL),
			 -LOCUS_ERANGE);
	b[3] = 14;
	b[6] = 1; b[7] = 0; /* 1 slot */
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, &err),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "slot count"));
	b[6] = 0x01; b[7] = 0x80; /* 32769 */
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, NULL),
			 -LOCUS_ERANGE);
	b[6] = 0; b[7] = 0x80; /* 32768 */
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, NULL), 0);
	/* an inbox wrapping the address space, or at 0 */
	memset(b + 16, 0xff, 8);
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, NULL),
			 -LOCUS_ERANGE);
	memset(b + 16, 0, 8);
	assert_int_equal(locus_verbs_hello_decode(b, 56, LOCUS_VERBS_HELLO_A, &q, NULL),
			 -LOCUS_ERANGE);
}

/* ---- the legs -------------------------------------------------------------------------------- */

/* A REQ the active side of t would send, through the wire encoding and back. */
static struct locus_verbs_pdata wire_req(const struct locus_verbs_transcript *t,
					 const uint8_t key[LOCUS_VERBS_SECRET_LEN], unsigned role)
{
	struct locus_verbs_pdata p = {
		.version = t->version, .kind = LOCUS_VERBS_PD_REQ, .cluster_id = t->cluster_id,
		.from = t->active_node, .to = t->passive_node,
	}, q;
	uint8_t b[LOCUS_VERBS_PDATA_MAX];

	memcpy(p.nonce, t->nonce_a, LOCUS_VERBS_NONCE_LEN);
	assert_int_equal(locus_verbs_auth_mac(key, role, t, p.mac), 0);
	assert_int_equal(locus_verbs_pdata_decode(b, locus_verbs_pdata_encode(&p, b),
						  LOCUS_VERBS_PD_REQ, &q, NULL), 0);
	return q;
}

/* The passive side's view of a request: its own ids, the request's node and nonce, the QP. */
static struct locus_verbs_transcript passive_view(const struct locus_verbs_pdata *req,
						  uint32_t active_qpn)
{
	struct locus_verbs_transcript t = sample_transcript();

	memset(t.nonce_a, 0, sizeof(t.nonce_a));
	memset(t.nonce_b, 0, sizeof(t.nonce_b));
	t.passive_qpn = 0;
	t.active_node = req->from;
	t.active_qpn = active_qpn;
	memcpy(t.nonce_a, req->nonce, LOCUS_VERBS_NONCE_LEN);
	return t;
}

static void test_req_admit(void **state)
{
	const struct locus_verbs_transcript a = sample_transcript();
	struct locus_verbs_replay *seen = calloc(1, sizeof(*seen));
	enum locus_verbs_auth_reason why;
	struct locus_verbs_pdata req;
	struct locus_verbs_transcript t;
	struct locus_error err;
	uint8_t wrong[LOCUS_VERBS_SECRET_LEN];
	(void)state;

	assert_non_null(seen);
	req = wire_req(&a, secret, LOCUS_VERBS_PD_REQ);
	t = passive_view(&req, a.active_qpn);
	assert_int_equal(locus_verbs_req_admit(&req, &t, secret, seen, &why, &err), 0);
	/* the passive side holds another secret */
	memcpy(wrong, secret, sizeof(wrong));
	wrong[0] ^= 1;
	assert_int_equal(locus_verbs_req_admit(&req, &t, wrong, seen, &why, &err), -LOCUS_EAUTH);
	assert_int_equal(why, LOCUS_VERBS_AUTH_REQ_MAC);
	assert_non_null(strstr(err.msg, "MAC"));
	/* the active side does */
	req = wire_req(&a, wrong, LOCUS_VERBS_PD_REQ);
	t = passive_view(&req, a.active_qpn);
	assert_int_equal(locus_verbs_req_admit(&req, &t, secret, seen, &why, NULL), -LOCUS_EAUTH);
	assert_int_equal(why, LOCUS_VERBS_AUTH_REQ_MAC);
	/* a nonce tampered with on the wire */
	req = wire_req(&a, secret, LOCUS_VERBS_PD_REQ);
	req.nonce[7] ^= 0x40;
	t = passive_view(&req, a.active_qpn);
	assert_int_equal(locus_verbs_req_admit(&req, &t, secret, seen, &why, NULL), -LOCUS_EAUTH);
	assert_int_equal(why, LOCUS_VERBS_AUTH_REQ_MAC);
	/* the request replayed from another QP (rdma_cm puts the sender's QP number in it) */
	req = wire_req(&a, secret, LOCUS_VERBS_PD_REQ);
	t = passive_view(&req, a.active_qpn + 1);
	assert_int_equal(locus_verbs_req_admit(&req, &t, secret, seen, &why, NULL), -LOCUS_EAUTH);
	assert_int_equal(why, LOCUS_VERBS_AUTH_REQ_MAC);
	/* another role's MAC in a request: the accept's, a hello's */
	for (unsigned role = LOCUS_VERBS_PD_REP; role <= LOCUS_VERBS_HELLO_P; role++) {
		req = wire_req(&a, secret, role);
		t = passive_view(&req, a.active_qpn);
		assert_int_equal(locus_verbs_req_admit(&req, &t, secret, seen, &why, NULL),
				 -LOCUS_EAUTH);
		assert_int_equal(why, LOCUS_VERBS_AUTH_REQ_MAC);
	}
	/* the last byte of the truncated MAC counts */
	req = wire_req(&a, secret, LOCUS_VERBS_PD_REQ);
	req.mac[LOCUS_VERBS_REQ_MAC_LEN - 1] ^= 1;
	t = passive_view(&req, a.active_qpn);
	assert_int_equal(locus_verbs_req_admit(&req, &t, secret, seen, &why, NULL), -LOCUS_EAUTH);
	/* another cluster; another addressee */
	req = wire_req(&a, secret, LOCUS_VERBS_PD_REQ);
	t = passive_view(&req, a.active_qpn);
	t.cluster_id++;
	assert_int_equal(locus_verbs_req_admit(&req, &t, secret, seen, &why, &err), -LOCUS_EAUTH);
	assert_int_equal(why, LOCUS_VERBS_AUTH_CLUSTER);
	assert_non_null(strstr(err.msg, "cluster"));
	t = passive_view(&req, a.active_qpn);
	t.passive_node++;
	assert_int_equal(locus_verbs_req_admit(&req, &t, secret, seen, &why, NULL), -LOCUS_EPROTO);
	/* a valid request seen before is a replay, refused before its MAC is even checked */
	t = passive_view(&req, a.active_qpn);
	locus_verbs_replay_add(seen, req.nonce);
	assert_int_equal(locus_verbs_req_admit(&req, &t, secret, seen, &why, &err), -LOCUS_EAUTH);
	assert_int_equal(why, LOCUS_VERBS_AUTH_REPLAY);
	assert_non_null(strstr(err.msg, "replay"));
	assert_int_equal(locus_verbs_req_admit(&req, &t, secret, NULL, &why, NULL), 0);
	/* the memory holds the last LOCUS_VERBS_REPLAY_SLOTS nonces */
	for (unsigned i = 0; i < LOCUS_VERBS_REPLAY_SLOTS - 1; i++) {
		uint8_t n[LOCUS_VERBS_NONCE_LEN] = { (uint8_t)i, 0xfe };

		locus_verbs_replay_add(seen, n);
	}
	assert_true(locus_verbs_replay_seen(seen, req.nonce));
	{
		uint8_t n[LOCUS_VERBS_NONCE_LEN] = { 0xff, 0xfe };

		locus_verbs_replay_add(seen, n);
		assert_true(locus_verbs_replay_seen(seen, n));
	}
	assert_false(locus_verbs_replay_seen(seen, req.nonce));
	assert_int_equal(seen->n, LOCUS_VERBS_REPLAY_SLOTS);
	free(seen);
}

/* The accept the passive side of t sends (MAC of role), through the wire and back. */
static struct locus_verbs_pdata wire_rep(const struct locus_verbs_transcript *t,
					 const uint8_t key[LOCUS_VERBS_SECRET_LEN], unsigned role)
{
	struct locus_verbs_pdata p = {
		.version = t->version, .kind = LOCUS_VERBS_PD_REP, .cluster_id = t->cluster_id,
		.from = t->passive_node, .to = t->active_node,
	}, q;
	uint8_t b[LOCUS_VERBS_PDATA_MAX];

	memcpy(p.nonce, t->nonce_b, LOCUS_VERBS_NONCE_LEN);
	assert_int_equal(locus_verbs_auth_mac(key, role, t, p.mac), 0);
	assert_int_equal(locus_verbs_pdata_decode(b, locus_verbs_pdata_encode(&p, b),
						  LOCUS_VERBS_PD_REP, &q, NULL), 0);
	return q;
}

static void test_rep_admit(void **state)
{
	const struct locus_verbs_transcript base = sample_transcript();
	struct locus_verbs_transcript t = base, fresh = base;
	enum locus_verbs_auth_reason why;
	struct locus_verbs_pdata rep;
	struct locus_error err;
	uint8_t wrong[LOCUS_VERBS_SECRET_LEN];
	(void)state;

	rep = wire_rep(&base, secret, LOCUS_VERBS_PD_REP);
	assert_int_equal(locus_verbs_rep_admit(&rep, &t, secret, &why, &err), 0);
	/* another secret on the passive side */
	memcpy(wrong, secret, sizeof(wrong));
	wrong[17] ^= 4;
	rep = wire_rep(&base, wrong, LOCUS_VERBS_PD_REP);
	assert_int_equal(locus_verbs_rep_admit(&rep, &t, secret, &why, &err), -LOCUS_EAUTH);
	assert_int_equal(why, LOCUS_VERBS_AUTH_REP_MAC);
	assert_non_null(strstr(err.msg, "MAC"));
	/* an accept captured from an earlier attempt: our nonce_a is new now */
	rep = wire_rep(&base, secret, LOCUS_VERBS_PD_REP);
	fresh.nonce_a[0] ^= 0xff;
	assert_int_equal(locus_verbs_rep_admit(&rep, &fresh, secret, &why, NULL), -LOCUS_EAUTH);
	assert_int_equal(why, LOCUS_VERBS_AUTH_REP_MAC);
	/* ... or from another QP of ours, or another QP of theirs */
	fresh = base;
	fresh.active_qpn++;
	assert_int_equal(locus_verbs_rep_admit(&rep, &fresh, secret, &why, NULL), -LOCUS_EAUTH);
	fresh = base;
	fresh.passive_qpn++;
	assert_int_equal(locus_verbs_rep_admit(&rep, &fresh, secret, &why, NULL), -LOCUS_EAUTH);
	/* a nonce_b tampered with on the wire */
	rep.nonce[0] ^= 1;
	fresh = base;
	memcpy(fresh.nonce_b, rep.nonce, LOCUS_VERBS_NONCE_LEN);
	assert_int_equal(locus_verbs_rep_admit(&rep, &fresh, secret, &why, NULL), -LOCUS_EAUTH);
	/* our own proofs reflected back as the passive side's */
	for (unsigned role = LOCUS_VERBS_PD_REQ; role <= LOCUS_VERBS_HELLO_P; role++) {
		if (role == LOCUS_VERBS_PD_REP)
			continue;
		rep = wire_rep(&base, secret, role);
		assert_int_equal(locus_verbs_rep_admit(&rep, &t, secret, &why, NULL), -LOCUS_EAUTH);
		assert_int_equal(why, LOCUS_VERBS_AUTH_REP_MAC);
	}
	/* someone else answering: other sender, addressee, cluster */
	rep = wire_rep(&base, secret, LOCUS_VERBS_PD_REP);
	rep.from++;
	assert_int_equal(locus_verbs_rep_admit(&rep, &t, secret, &why, NULL), -LOCUS_EPROTO);
	rep.from--;
	rep.to++;
	assert_int_equal(locus_verbs_rep_admit(&rep, &t, secret, &why, NULL), -LOCUS_EPROTO);
	rep.to--;
	rep.cluster_id++;
	assert_int_equal(locus_verbs_rep_admit(&rep, &t, secret, &why, NULL), -LOCUS_EAUTH);
	assert_int_equal(why, LOCUS_VERBS_AUTH_CLUSTER);
}

static void test_hello_admit(void **state)
{
	const struct locus_verbs_transcript base = sample_transcript();
	struct locus_verbs_transcript other = base;
	struct locus_verbs_hello h = sample_hello();
	uint8_t expect[32];
	(void)state;

	/* the passive side expects the active side's proof of this connection */
	assert_int_equal(locus_verbs_auth_mac(secret, LOCUS_VERBS_HELLO_A, &base, expect), 0);
	h.from = base.active_node;
	memcpy(h.mac, expect, 32);
	assert_int_equal(locus_verbs_hello_admit(&h, base.active_node, expect), 0);
	/* the passive side's own hello MAC reflected back, the accept's, the request's */
	for (unsigned role = LOCUS_VERBS_PD_REQ; role <= LOCUS_VERBS_HELLO_P; role++) {
		if (role == LOCUS_VERBS_HELLO_A)
			continue;
		assert_int_equal(locus_verbs_auth_mac(secret, role, &base, h.mac), 0);
		assert_int_equal(locus_verbs_hello_admit(&h, base.active_node, expect), -LOCUS_EAUTH);
	}
	/* a proof captured from an earlier connection (other nonce_b, other QP) */
	other.nonce_b[9] ^= 2;
	assert_int_equal(locus_verbs_auth_mac(secret, LOCUS_VERBS_HELLO_A, &other, h.mac), 0);
	assert_int_equal(locus_verbs_hello_admit(&h, base.active_node, expect), -LOCUS_EAUTH);
	other = base;
	other.passive_qpn++;
	assert_int_equal(locus_verbs_auth_mac(secret, LOCUS_VERBS_HELLO_A, &other, h.mac), 0);
	assert_int_equal(locus_verbs_hello_admit(&h, base.active_node, expect), -LOCUS_EAUTH);
	memcpy(h.mac, expect, 32);
	h.mac[31] ^= 1;
	assert_int_equal(locus_verbs_hello_admit(&h, base.active_node, expect), -LOCUS_EAUTH);
	/* the right proof from another node id */
	memcpy(h.mac, expect, 32);
	assert_int_equal(locus_verbs_hello_admit(&h, base.active_node + 1, expect), -LOCUS_EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hmac_rfc4231),
		cmocka_unit_test(test_mac_independent),
		cmocka_unit_test(test_mac_covers_everything),
		cmocka_unit_test(test_mac_equal_and_nonce),
		cmocka_unit_test(test_pdata_layout),
		cmocka_unit_test(test_pdata_malformed),
		cmocka_unit_test(test_hello_encoding),
		cmocka_unit_test(test_req_admit),
		cmocka_unit_test(test_rep_admit),
		cmocka_unit_test(test_hello_admit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
