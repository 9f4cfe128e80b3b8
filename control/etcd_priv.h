/* SPDX-License-Identifier: MIT */
/* What etcd.c and etcd_watch.c share (control/ only). */
#ifndef LOCUS_ETCD_PRIV_H
#define LOCUS_ETCD_PRIV_H

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "locus_etcd.h"

/* The kvs an answer or an event batch decoded: freed with it. */
struct etcd_store {
	struct locus_etcd_kv *kvs;
	size_t n, cap;
};

struct locus_etcd_watch;

struct locus_etcd_req {
	struct locus_etcd *e;
	struct locus_etcd_req *next;
	CURL *easy;
	struct curl_slist *headers;
	char *body;
	char *rx;                 /* the answer so far */
	size_t rx_len, rx_cap;
	unsigned endpoint;        /* index it went to */
	char what[48];            /* "POST /v3/kv/put": for messages */
	locus_etcd_done_fn done;
	void *arg;
	struct etcd_store store;
	struct locus_etcd_watch *watch; /* a watch's stream, else NULL */
	uint8_t keep;             /* a blocking call frees it */
	uint8_t finished;
};

struct locus_etcd {
	CURLM *multi;
	char *endpoint[LOCUS_ETCD_MAX_ENDPOINTS];
	unsigned n_endpoints, cur;
	char *cacert, *cert, *key;
	uint32_t timeout_ms;
	uint8_t in_perform;          /* inside curl_multi_perform: handles may not be freed */
	struct locus_etcd_req *reqs; /* open requests and watches, newest first */
};

struct locus_etcd_req *etcd_req_new(struct locus_etcd *e, const char *path, char *body,
				     struct locus_etcd_watch *stream, struct locus_error *err);
void etcd_req_free(struct locus_etcd *e, struct locus_etcd_req *q);
char *etcd_b64(const void *buf, size_t len);
uint8_t *etcd_unb64(const char *s, size_t *len);
int64_t etcd_i64(const json_t *o, const char *name);
int etcd_store_kv(struct etcd_store *s, const json_t *o);
void etcd_store_free(struct etcd_store *s);

/* etcd_watch.c: bytes of a watch's stream, and its end. */
size_t etcd_watch_data(struct locus_etcd_req *q, const char *data, size_t n);
void etcd_watch_finish(struct locus_etcd *e, struct locus_etcd_req *q, CURLcode cc);
void etcd_watch_free(struct locus_etcd_watch *w);
/* Free the watches cancelled while curl was running them. */
void etcd_watch_sweep(struct locus_etcd *e);

#endif /* LOCUS_ETCD_PRIV_H */
