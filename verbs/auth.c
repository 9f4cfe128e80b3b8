// SPDX-License-Identifier: MIT
/*
 * The handshake's proofs: HMAC-SHA-256 (OpenSSL libcrypto) over the
 * connection transcript, constant-time comparison, nonces, the passive
 * side's memory of request nonces, and the checks of each leg. No verbs:
 * unit-tested on the host. The primitive is never reimplemented here.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "locus_err_priv.h"
#include "locus_verbs.h"

/* Domain separation: the secret keys nothing else with this prefix. */
static const char auth_label[16] = "locus-verbs-auth";

int locus_verbs_hmac_sha256(const uint8_t *key, size_t key_len, const struct locus_verbs_iov *msg,
			    unsigned n, uint8_t out[LOCUS_VERBS_MAC_LEN])
{
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	EVP_MAC_CTX *ctx = NULL;
	EVP_MAC *mac;
	size_t out_len = 0;
	int rc = -EIO;

	mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	if (!mac)
		return -EIO;
	ctx = EVP_MAC_CTX_new(mac);
	if (!ctx)
		goto err_mac;
	if (EVP_MAC_init(ctx, key, key_len, params) != 1)
		goto err_ctx;
	for (unsigned i = 0; i < n; i++)
		if (msg[i].len && EVP_MAC_update(ctx, msg[i].base, msg[i].len) != 1)
			goto err_ctx;
	if (EVP_MAC_final(ctx, out, &out_len, LOCUS_VERBS_MAC_LEN) == 1 &&
	    out_len == LOCUS_VERBS_MAC_LEN)
		rc = 0;
err_ctx:
	EVP_MAC_CTX_free(ctx);
err_mac:
	EVP_MAC_free(mac);
	return rc;
}

static void le16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static void le32(uint8_t *b, uint32_t v)
{
	le16(b, (uint16_t)v);
	le16(b + 2, (uint16_t)(v >> 16));
}

int locus_verbs_auth_mac(const uint8_t secret[LOCUS_VERBS_SECRET_LEN], unsigned role,
			 const struct locus_verbs_transcript *t, uint8_t mac[LOCUS_VERBS_MAC_LEN])
{
	static const uint8_t zero_nonce[LOCUS_VERBS_NONCE_LEN];
	bool req = role == LOCUS_VERBS_PD_REQ;
	uint8_t ids[19];
	struct locus_verbs_iov msg[] = {
		{ auth_label, sizeof(auth_label) },
		{ ids, sizeof(ids) },
		{ t->nonce_a, LOCUS_VERBS_NONCE_LEN },
		{ req ? zero_nonce : t->nonce_b, LOCUS_VERBS_NONCE_LEN },
	};

	if (role < LOCUS_VERBS_PD_REQ || role > LOCUS_VERBS_HELLO_P)
		return -EINVAL;
	ids[0] = (uint8_t)role;
	le16(ids + 1, t->version);
	le32(ids + 3, t->cluster_id);
	le16(ids + 7, t->active_node);
	le16(ids + 9, t->passive_node);
	le32(ids + 11, t->active_qpn);
	le32(ids + 15, req ? 0 : t->passive_qpn);
	return locus_verbs_hmac_sha256(secret, LOCUS_VERBS_SECRET_LEN, msg, LOCUS_ARRAY_SIZE(msg),
				       mac);
}

int locus_verbs_mac_equal(const void *a, const void *b, size_t n)
{
	return CRYPTO_memcmp(a, b, n) == 0;
}

int locus_verbs_nonce(uint8_t *buf, size_t n)
{
	return RAND_bytes(buf, (int)n) == 1 ? 0 : -EIO;
}

bool locus_verbs_replay_seen(const struct locus_verbs_replay *r,
			     const uint8_t nonce[LOCUS_VERBS_NONCE_LEN])
{
	for (uint32_t i = 0; i < r->n; i++)
		if (!memcmp(r->nonce[i], nonce, LOCUS_VERBS_NONCE_LEN))
			return true;
	return false;
}

void locus_verbs_replay_add(struct locus_verbs_replay *r, const uint8_t nonce[LOCUS_VERBS_NONCE_LEN])
{
	memcpy(r->nonce[r->next], nonce, LOCUS_VERBS_NONCE_LEN);
	r->next = (r->next + 1) % LOCUS_VERBS_REPLAY_SLOTS;
	if (r->n < LOCUS_VERBS_REPLAY_SLOTS)
		r->n++;
}

static int refuse(enum locus_verbs_auth_reason *why, enum locus_verbs_auth_reason r)
{
	if (why)
		*why = r;
	return -LOCUS_EAUTH;
}

int locus_verbs_req_admit(const struct locus_verbs_pdata *req, const struct locus_verbs_transcript *t,
			  const uint8_t secret[LOCUS_VERBS_SECRET_LEN],
			  const struct locus_verbs_replay *seen, enum locus_verbs_auth_reason *why,
			  struct locus_error *err)
{
	uint8_t want[LOCUS_VERBS_MAC_LEN];

	if (req->cluster_id != t->cluster_id) {
		locus_error_set(err, LOCUS_EAUTH, "node %u belongs to cluster %u, we are %u",
				req->from, req->cluster_id, t->cluster_id);
		return refuse(why, LOCUS_VERBS_AUTH_CLUSTER);
	}
	if (req->from != t->active_node || req->to != t->passive_node)
		return locus_error_set(err, LOCUS_EPROTO, "request from node %u for node %u, we "
				       "are node %u expecting node %u", req->from, req->to,
				       t->passive_node, t->active_node);
	if (memcmp(req->nonce, t->nonce_a, LOCUS_VERBS_NONCE_LEN))
		return locus_error_set(err, LOCUS_EPROTO, "transcript does not hold the request's nonce");
	if (seen && locus_verbs_replay_seen(seen, req->nonce)) {
		locus_error_set(err, LOCUS_EAUTH, "node %u: request nonce seen before (a replay)",
				req->from);
		return refuse(why, LOCUS_VERBS_AUTH_REPLAY);
	}
	if (locus_verbs_auth_mac(secret, LOCUS_VERBS_PD_REQ, t, want) < 0) {
		locus_error_set(err, LOCUS_EAUTH, "cannot compute the request's MAC (libcrypto)");
		return refuse(why, LOCUS_VERBS_AUTH_REQ_MAC);
	}
	if (!locus_verbs_mac_equal(req->mac, want, LOCUS_VERBS_REQ_MAC_LEN)) {
		locus_error_set(err, LOCUS_EAUTH, "node %u: the request's MAC is wrong (another "
				"secret, or an altered or replayed request)", req->from);
		return refuse(why, LOCUS_VERBS_AUTH_REQ_MAC);
	}
	return 0;
}

int locus_verbs_rep_admit(const struct locus_verbs_pdata *rep, const struct locus_verbs_transcript *t,
			  const uint8_t secret[LOCUS_VERBS_SECRET_LEN],
			  enum locus_verbs_auth_reason *why, struct locus_error *err)
{
	uint8_t want[LOCUS_VERBS_MAC_LEN];

	if (rep->cluster_id != t->cluster_id) {
		locus_error_set(err, LOCUS_EAUTH, "node %u belongs to cluster %u, we are %u",
				rep->from, rep->cluster_id, t->cluster_id);
		return refuse(why, LOCUS_VERBS_AUTH_CLUSTER);
	}
	if (rep->from != t->passive_node || rep->to != t->active_node)
		return locus_error_set(err, LOCUS_EPROTO, "accept from node %u for node %u, we are "
				       "node %u dialling node %u", rep->from, rep->to,
				       t->active_node, t->passive_node);
	if (memcmp(rep->nonce, t->nonce_b, LOCUS_VERBS_NONCE_LEN))
		return locus_error_set(err, LOCUS_EPROTO, "transcript does not hold the accept's nonce");
	if (locus_verbs_auth_mac(secret, LOCUS_VERBS_PD_REP, t, want) < 0) {
		locus_error_set(err, LOCUS_EAUTH, "cannot compute the accept's MAC (libcrypto)");
		return refuse(why, LOCUS_VERBS_AUTH_REP_MAC);
	}
	if (!locus_verbs_mac_equal(rep->mac, want, LOCUS_VERBS_MAC_LEN)) {
		locus_error_set(err, LOCUS_EAUTH, "node %u: the accept's MAC is wrong (another "
				"secret, or a replayed accept)", rep->from);
		return refuse(why, LOCUS_VERBS_AUTH_REP_MAC);
	}
	return 0;
}

int locus_verbs_hello_admit(const struct locus_verbs_hello *h, uint16_t from,
			    const uint8_t expect[LOCUS_VERBS_MAC_LEN])
{
	if (h->from != from)
		return -LOCUS_EPROTO;
	return locus_verbs_mac_equal(h->mac, expect, LOCUS_VERBS_MAC_LEN) ? 0 : -LOCUS_EAUTH;
}
