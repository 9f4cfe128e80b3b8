// SPDX-License-Identifier: MIT
/*
 * What a peer node's RDMA stack hands the verbs transport before anything
 * is trusted (verbs/proto.c): connection private data (REQ, REP), the
 * hellos on the QP, and each arriving message's immediate and length
 * against the inbox ring. The first input byte picks which; the rest is
 * the bytes (or, for the ring, geometry, head, immediate and length).
 * Contract, from locus_verbs.h: what decodes keeps its layout's rules and
 * encodes back to the same bytes; a hello's inbox does not wrap the
 * address space; an admitted request or hello carries the MAC computed
 * for it; a message the receiver accepts is exactly where, and as long as,
 * the sender's own arithmetic (locus_verbs_place, slots_for) puts it.
 */
#include "fuzz.h"
#include "locus_verbs.h"

static const uint8_t secret[LOCUS_VERBS_SECRET_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8 };

static void pdata(const uint8_t *b, size_t n, unsigned kind)
{
	struct locus_verbs_transcript t = { .version = LOCUS_VERBS_PROTO_VERSION,
					    .active_qpn = 0x11, .passive_qpn = 0x22 };
	struct locus_error err = { 0 };
	struct locus_verbs_replay seen = { .n = 0 };
	struct locus_verbs_pdata p;
	uint8_t out[LOCUS_VERBS_PDATA_MAX], mac[LOCUS_VERBS_MAC_LEN];
	enum locus_verbs_auth_reason why;
	size_t len;
	int ret;

	ret = locus_verbs_pdata_decode(b, n, kind, &p, &err);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal without a sentence");
		return;
	}
	len = locus_verbs_pdata_encode(&p, out);
	FUZZ_CHECK(len == (kind == LOCUS_VERBS_PD_REQ ? LOCUS_VERBS_REQ_LEN : LOCUS_VERBS_REP_LEN) &&
		   n >= len && !memcmp(out, b, len), "private data does not encode back the same");
	/* our view agrees with what it claims: only the MAC can still refuse it */
	t.cluster_id = p.cluster_id;
	if (kind == LOCUS_VERBS_PD_REQ) {
		t.active_node = p.from;
		t.passive_node = p.to;
		memcpy(t.nonce_a, p.nonce, sizeof(t.nonce_a));
		ret = locus_verbs_req_admit(&p, &t, secret, &seen, &why, NULL);
		if (ret == 0) {
			FUZZ_CHECK(locus_verbs_auth_mac(secret, LOCUS_VERBS_PD_REQ, &t, mac) == 0 &&
				   !memcmp(mac, p.mac, LOCUS_VERBS_REQ_MAC_LEN),
				   "a request admitted without its MAC");
		}
		/* the same request with the right MAC is admitted, once */
		if (locus_verbs_auth_mac(secret, LOCUS_VERBS_PD_REQ, &t, mac) == 0) {
			memcpy(p.mac, mac, LOCUS_VERBS_REQ_MAC_LEN);
			FUZZ_CHECK(locus_verbs_req_admit(&p, &t, secret, &seen, &why, NULL) == 0,
				   "a request with its MAC refused");
			locus_verbs_replay_add(&seen, p.nonce);
			FUZZ_CHECK(locus_verbs_req_admit(&p, &t, secret, &seen, &why, NULL) ==
				   -LOCUS_EAUTH && why == LOCUS_VERBS_AUTH_REPLAY,
				   "a replayed request admitted");
		}
	} else {
		t.active_node = p.to;
		t.passive_node = p.from;
		memcpy(t.nonce_b, p.nonce, sizeof(t.nonce_b));
		ret = locus_verbs_rep_admit(&p, &t, secret, &why, NULL);
		if (ret == 0)
			FUZZ_CHECK(locus_verbs_auth_mac(secret, LOCUS_VERBS_PD_REP, &t, mac) == 0 &&
				   !memcmp(mac, p.mac, LOCUS_VERBS_MAC_LEN),
				   "an accept admitted without its MAC");
	}
}

static void hello(const uint8_t *b, size_t n, unsigned kind)
{
	struct locus_error err = { 0 };
	struct locus_verbs_hello h;
	uint8_t out[LOCUS_VERBS_HELLO_LEN], mac[LOCUS_VERBS_MAC_LEN] = { 0 };
	uint64_t span;
	int ret;

	ret = locus_verbs_hello_decode(b, n, kind, &h, &err);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal without a sentence");
		return;
	}
	locus_verbs_hello_encode(&h, out);
	FUZZ_CHECK(n == sizeof(out) && !memcmp(out, b, sizeof(out)),
		   "a hello does not encode back the same");
	FUZZ_CHECK(h.slot_shift >= LOCUS_VERBS_SLOT_SHIFT_MIN &&
		   h.slot_shift <= LOCUS_VERBS_SLOT_SHIFT_MAX &&
		   h.slot_count >= LOCUS_VERBS_SLOTS_MIN && h.slot_count <= LOCUS_VERBS_SLOTS_MAX,
		   "slot geometry %u << %u", h.slot_count, h.slot_shift);
	span = ((uint64_t)h.slot_count << h.slot_shift) + LOCUS_VERBS_CTRL_LEN;
	FUZZ_CHECK(h.inbox_addr && h.inbox_addr + span > h.inbox_addr, "inbox wraps");
	ret = locus_verbs_hello_admit(&h, h.from, mac);
	FUZZ_CHECK(ret == 0 ? !memcmp(h.mac, mac, sizeof(mac)) : ret < 0,
		   "hello admitted with another MAC");
	FUZZ_CHECK(locus_verbs_hello_admit(&h, (uint16_t)(h.from + 1), h.mac) == -LOCUS_EPROTO,
		   "a hello from another node admitted");
}

static void ring(struct fuzz_in *in)
{
	struct locus_verbs_ring r = { .slot_count = LOCUS_VERBS_SLOTS_MIN +
					      fin_u16(in) % (LOCUS_VERBS_SLOTS_MAX - 1),
				      .slot_shift = LOCUS_VERBS_SLOT_SHIFT_MIN + fin_u8(in) % 19 };
	uint64_t head = fin_u64(in);
	uint32_t imm = fin_u32(in), len = fin_u32(in), index, n, consumed, i2, used;

	if (locus_verbs_ring_accept(&r, head, imm, len, &index, &n, &consumed) < 0)
		return;
	FUZZ_CHECK(n >= 1 && n <= r.slot_count / 2 && index + n <= r.slot_count,
		   "accepted %u slots at %u of %u", n, index, r.slot_count);
	FUZZ_CHECK(locus_verbs_slots_for(&r, len) == n && len <= locus_verbs_max_msg(&r),
		   "%u bytes are not %u slots of %u", len, n, 1u << r.slot_shift);
	used = locus_verbs_place(&r, head, n, &i2);
	FUZZ_CHECK(i2 == index && used == consumed && imm == locus_verbs_imm_encode(index, n),
		   "the receiver takes %u slots at %u, the sender would write %u at %u", consumed,
		   index, used, i2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	uint8_t what = fin_u8(&in);
	uint8_t *b = fuzz_dup(in.p, in.n);

	switch (what % 5) {
	case 0:
		pdata(b, in.n, LOCUS_VERBS_PD_REQ);
		break;
	case 1:
		pdata(b, in.n, LOCUS_VERBS_PD_REP);
		break;
	case 2:
		hello(b, in.n, LOCUS_VERBS_HELLO_A);
		break;
	case 3:
		hello(b, in.n, LOCUS_VERBS_HELLO_P);
		break;
	default:
		ring(&in);
		break;
	}
	free(b);
	return 0;
}
