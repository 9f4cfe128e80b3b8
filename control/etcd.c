// SPDX-License-Identifier: MIT
/*
 * The etcd client (locus_etcd.h): requests over libcurl's multi interface,
 * bodies and answers in JSON (jansson), keys and values in base64 (OpenSSL).
 * Watches are in etcd_watch.c; what both share is in etcd_priv.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd_priv.h"
#include "locus_err_priv.h"

static int curl_ready;

/* Split and check "url,url,...": http:// or https://, a host, a port. */
static int parse_endpoints(struct locus_etcd *e, const char *list, struct locus_error *err)
{
	const char *p = list;

	if (!list || !*list)
		return locus_error_set(err, LOCUS_EPARSE, "etcd: no endpoint given");
	while (*p) {
		const char *end = strchr(p, ','), *host;
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char *url;

		if (e->n_endpoints == LOCUS_ETCD_MAX_ENDPOINTS)
			return locus_error_set(err, LOCUS_ERANGE, "etcd: more than %d endpoints",
					       LOCUS_ETCD_MAX_ENDPOINTS);
		if (!len || len > 255)
			return locus_error_set(err, LOCUS_EPARSE, "etcd: endpoint %u is %s",
					       e->n_endpoints + 1, len ? "too long" : "empty");
		url = strndup(p, len);
		if (!url)
			return -ENOMEM;
		e->endpoint[e->n_endpoints++] = url;
		while (len && url[len - 1] == '/')
			url[--len] = '\0';
		if (!strncmp(url, "http://", 7))
			host = url + 7;
		else if (!strncmp(url, "https://", 8))
			host = url + 8;
		else
			return locus_error_set(err, LOCUS_EPARSE, "etcd: endpoint '%s' is not an "
					       "http:// or https:// URL", url);
		if (!*host || !strrchr(host, ':') || strchr(host, '/') || strchr(host, ' '))
			return locus_error_set(err, LOCUS_EPARSE, "etcd: endpoint '%s' is not "
					       "scheme://host:port", url);
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

static int copy_file_param(const char *what, const char *path, char **out,
			   struct locus_error *err)
{
	if (!path || !*path)
		return 0;
	if (access(path, R_OK) < 0)
		return locus_error_set(err, errno, "etcd: %s %s: %s", what, path, strerror(errno));
	*out = strdup(path);
	return *out ? 0 : -ENOMEM;
}

int locus_etcd_open(const struct locus_etcd_params *p, struct locus_etcd **out,
		    struct locus_error *err)
{
	struct locus_etcd *e;
	int ret;

	*out = NULL;
	if (!curl_ready) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT))
			return locus_error_set(err, EIO, "etcd: libcurl did not initialise");
		curl_ready = 1;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->timeout_ms = p->timeout_ms ? p->timeout_ms : 2000;
	ret = parse_endpoints(e, p->endpoints, err);
	if (ret < 0)
		goto err_free;
	if (!p->cert != !p->key) {
		ret = locus_error_set(err, LOCUS_EPARSE, "etcd: a client certificate needs its key "
				      "and a key its certificate");
		goto err_free;
	}
	ret = copy_file_param("CA bundle", p->cacert, &e->cacert, err);
	if (!ret)
		ret = copy_file_param("client certificate", p->cert, &e->cert, err);
	if (!ret)
		ret = copy_file_param("client key", p->key, &e->key, err);
	if (ret < 0)
		goto err_free;
	e->multi = curl_multi_init();
	if (!e->multi) {
		ret = locus_error_set(err, ENOMEM, "etcd: no curl multi handle");
		goto err_free;
	}
	*out = e;
	return 0;

err_free:
	locus_etcd_close(e);
	return ret;
}

void locus_etcd_close(struct locus_etcd *e)
{
	if (!e)
		return;
	while (e->reqs)
		etcd_req_free(e, e->reqs);
	if (e->multi)
		curl_multi_cleanup(e->multi);
	for (unsigned i = 0; i < e->n_endpoints; i++)
		free(e->endpoint[i]);
	free(e->cacert);
	free(e->cert);
	free(e->key);
	free(e);
}

const char *locus_etcd_endpoint(const struct locus_etcd *e)
{
	return e->endpoint[e->cur];
}

/* ---- base64 ---- */

char *etcd_b64(const void *buf, size_t len)
{
	char *out = malloc(4 * ((len + 2) / 3) + 1);

	if (out)
		EVP_EncodeBlock((unsigned char *)out, buf, (int)len);
	return out;
}

/* Decode s into a fresh buffer with a NUL after its *len bytes; NULL if not base64. */
uint8_t *etcd_unb64(const char *s, size_t *len)
{
	size_t n = strlen(s), pad = 0;
	uint8_t *out;
	int got;

	if (n % 4 || n > 2 * (size_t)LOCUS_ETCD_VALUE_MAX)
		return NULL;
	out = malloc(n / 4 * 3 + 1);
	if (!out)
		return NULL;
	got = n ? EVP_DecodeBlock(out, (const unsigned char *)s, (int)n) : 0;
	if (got < 0) {
		free(out);
		return NULL;
	}
	if (n && s[n - 1] == '=')
		pad++;
	if (n > 1 && s[n - 2] == '=')
		pad++;
	*len = (size_t)got - pad;
	out[*len] = 0;
	return out;
}

/* ---- requests ---- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	struct locus_etcd_req *q = arg;
	size_t n = size * nmemb;

	if (q->watch)
		return etcd_watch_data(q, data, n);
	if (q->rx_len + n > LOCUS_ETCD_VALUE_MAX)
		return 0; /* curl fails the transfer: CURLE_WRITE_ERROR */
	if (q->rx_len + n + 1 > q->rx_cap) {
		size_t cap = q->rx_cap ? q->rx_cap : 4096;
		char *nb;

		while (cap < q->rx_len + n + 1)
			cap *= 2;
		nb = realloc(q->rx, cap);
		if (!nb)
			return 0;
		q->rx = nb;
		q->rx_cap = cap;
	}
	memcpy(q->rx + q->rx_len, data, n);
	q->rx_len += n;
	q->rx[q->rx_len] = 0;
	return n;
}

void etcd_req_free(struct locus_etcd *e, struct locus_etcd_req *q)
{
	struct locus_etcd_req **pp;

	for (pp = &e->reqs; *pp; pp = &(*pp)->next) {
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	}
	if (q->easy) {
		curl_multi_remove_handle(e->multi, q->easy);
		curl_easy_cleanup(q->easy);
	}
	curl_slist_free_all(q->headers);
	free(q->body);
	free(q->rx);
	etcd_store_free(&q->store);
	etcd_watch_free(q->watch);
	free(q);
}

/*
 * A request for path with body (taken), on the current endpoint; a stream
 * (a watch) has no overall time bound and its bytes go to etcd_watch_data.
 */
struct locus_etcd_req *etcd_req_new(struct locus_etcd *e, const char *path, char *body,
				     struct locus_etcd_watch *stream, struct locus_error *err)
{
	struct locus_etcd_req *q = calloc(1, sizeof(*q));
	char url[320];

	if (!q || !body) {
		free(q);
		free(body);
		locus_error_set(err, ENOMEM, "etcd: out of memory for a request");
		return NULL;
	}
	q->e = e;
	q->body = body;
	q->endpoint = e->cur;
	snprintf(url, sizeof(url), "%s%s", e->endpoint[e->cur], path);
	snprintf(q->what, sizeof(q->what), "POST %s", path);
	q->easy = curl_easy_init();
	q->headers = curl_slist_append(NULL, "Content-Type: application/json");
	if (!q->easy || !q->headers) {
		etcd_req_free(e, q);
		locus_error_set(err, ENOMEM, "etcd: out of memory for a request");
		return NULL;
	}
	curl_easy_setopt(q->easy, CURLOPT_URL, url);
	curl_easy_setopt(q->easy, CURLOPT_POSTFIELDS, q->body);
	curl_easy_setopt(q->easy, CURLOPT_HTTPHEADER, q->headers);
	curl_easy_setopt(q->easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(q->easy, CURLOPT_WRITEDATA, q);
	curl_easy_setopt(q->easy, CURLOPT_PRIVATE, q);
	curl_easy_setopt(q->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(q->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
	curl_easy_setopt(q->easy, CURLOPT_TIMEOUT_MS, stream ? 0L : (long)e->timeout_ms);
	curl_easy_setopt(q->easy, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(q->easy, CURLOPT_TCP_KEEPIDLE, 2L);
	curl_easy_setopt(q->easy, CURLOPT_TCP_KEEPINTVL, 1L);
	curl_easy_setopt(q->easy, CURLOPT_PROTOCOLS_STR, "http,https");
	if (e->cacert)
		curl_easy_setopt(q->easy, CURLOPT_CAINFO, e->cacert);
	if (e->cert) {
		curl_easy_setopt(q->easy, CURLOPT_SSLCERT, e->cert);
		curl_easy_setopt(q->easy, CURLOPT_SSLKEY, e->key);
	}
	if (curl_multi_add_handle(e->multi, q->easy) != CURLM_OK) {
		etcd_req_free(e, q);
		locus_error_set(err, EIO, "etcd: curl refused a request");
		return NULL;
	}
	q->watch = stream; /* from here on the request owns it */
	q->next = e->reqs;
	e->reqs = q;
	return q;
}

/* ---- answers ---- */

void etcd_store_free(struct etcd_store *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free((void *)s->kvs[i].key);
		free((void *)s->kvs[i].value);
	}
	free(s->kvs);
	memset(s, 0, sizeof(*s));
}

/* A JSON int64 the gateway writes as a string ("123"), or absent (0). */
int64_t etcd_i64(const json_t *o, const char *name)
{
	const json_t *v = json_object_get(o, name);

	if (json_is_string(v))
		return strtoll(json_string_value(v), NULL, 10);
	if (json_is_integer(v))
		return json_integer_value(v);
	return 0;
}

/* Append the kv object o to s. 0, or -LOCUS_EPROTO when it is not one. */
int etcd_store_kv(struct etcd_store *s, const json_t *o)
{
	const char *k = json_string_value(json_object_get(o, "key"));
	const char *v = json_string_value(json_object_get(o, "value"));
	struct locus_etcd_kv *kv;
	uint8_t *key, *val;
	size_t klen, vlen = 0;

	if (!json_is_object(o) || !k)
		return -LOCUS_EPROTO;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 8;
		struct locus_etcd_kv *nk = realloc(s->kvs, cap * sizeof(*nk));

		if (!nk)
			return -ENOMEM;
		s->kvs = nk;
		s->cap = cap;
	}
	key = etcd_unb64(k, &klen);
	val = etcd_unb64(v ? v : "", &vlen);
	if (!key || !val || memchr(key, 0, klen)) {
		free(key);
		free(val);
		return -LOCUS_EPROTO;
	}
	kv = &s->kvs[s->n++];
	kv->key = (const char *)key;
	kv->value = val;
	kv->value_len = vlen;
	kv->create_rev = etcd_i64(o, "create_revision");
	kv->mod_rev = etcd_i64(o, "mod_revision");
	kv->version = etcd_i64(o, "version");
	kv->lease = etcd_i64(o, "lease");
	return 0;
}

static int store_kvs(struct etcd_store *s, const json_t *arr)
{
	size_t i;
	json_t *o;

	if (!arr)
		return 0;
	if (!json_is_array(arr))
		return -LOCUS_EPROTO;
	json_array_foreach(arr, i, o) {
		int ret = etcd_store_kv(s, o);

		if (ret < 0)
			return ret;
	}
	return 0;
}

/* One response (range, put, delete_range) of a request or a txn. */
static int parse_one(struct locus_etcd_req *q, const json_t *o, struct locus_etcd_resp *r)
{
	int ret = store_kvs(&q->store, json_object_get(o, "kvs"));

	if (!ret)
		ret = store_kvs(&q->store, json_object_get(o, "prev_kvs"));
	if (!ret && json_object_get(o, "prev_kv"))
		ret = etcd_store_kv(&q->store, json_object_get(o, "prev_kv"));
	r->deleted += etcd_i64(o, "deleted");
	return ret;
}

static int parse_answer(struct locus_etcd_req *q, json_t *doc, struct locus_etcd_resp *r)
{
	json_t *o = json_object_get(doc, "result") ? json_object_get(doc, "result") : doc;
	json_t *resps = json_object_get(o, "responses");
	int ret = 0;

	r->revision = etcd_i64(json_object_get(o, "header"), "revision");
	r->succeeded = json_is_true(json_object_get(o, "succeeded"));
	r->lease_id = etcd_i64(o, "ID");
	r->ttl = etcd_i64(o, "TTL");
	if (json_is_array(resps)) {
		size_t i;
		json_t *one;

		json_array_foreach(resps, i, one) {
			json_t *body = json_object_get(one, "response_range");

			if (!body)
				body = json_object_get(one, "response_put");
			if (!body)
				body = json_object_get(one, "response_delete_range");
			if (body && (ret = parse_one(q, body, r)) < 0)
				break;
		}
	} else {
		ret = parse_one(q, o, r);
	}
	r->kvs = q->store.kvs;
	r->n_kvs = q->store.n;
	return ret;
}

/* The gateway's refusal: {"error": "...", "code": N, "message": "..."}. */
static int gateway_error(const json_t *doc, long http, struct locus_etcd_resp *r,
			 const char *where)
{
	const char *m = json_string_value(json_object_get(doc, "message"));
	int64_t code = etcd_i64(doc, "code");
	/* gRPC codes: 3 invalid argument, 5 not found, 7 permission, 9 precondition, 16 auth */
	int ret = code == 7 || code == 16 ? EACCES : code == 3 ? EINVAL : code == 5 ? ENOENT :
		  code == 9 ? LOCUS_ESTATE : EIO;

	if (!m)
		m = json_string_value(json_object_get(doc, "error"));
	r->status = locus_error_set(&r->err, ret, "etcd %s: %s: HTTP %ld: %s", where,
				    locus_strerror(ret), http, m ? m : "no message");
	return r->status;
}

/* What a finished transfer became; also moves on to the next endpoint when it failed. */
static void finish(struct locus_etcd *e, struct locus_etcd_req *q, CURLcode cc)
{
	struct locus_etcd_resp r = { 0 };
	const char *ep = e->endpoint[q->endpoint];
	long http = 0;
	json_t *doc = NULL;
	json_error_t jerr;
	char where[400];

	snprintf(where, sizeof(where), "%s %s", ep, q->what);
	curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &http);
	if (cc != CURLE_OK) {
		int ret = cc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT :
			  cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
			  cc == CURLE_GOT_NOTHING || cc == CURLE_RECV_ERROR ||
			  cc == CURLE_SEND_ERROR ? ENOTCONN :
			  cc == CURLE_WRITE_ERROR ? LOCUS_ERANGE :
			  cc == CURLE_SSL_CONNECT_ERROR || cc == CURLE_PEER_FAILED_VERIFICATION ||
			  cc == CURLE_SSL_CERTPROBLEM || cc == CURLE_SSL_CACERT_BADFILE ? EACCES : EIO;

		r.status = locus_error_set(&r.err, ret, "etcd %s: %s%s", where,
					   curl_easy_strerror(cc),
					   ret == LOCUS_ERANGE ? " (answer over the size bound)" : "");
		if (ret != LOCUS_ERANGE && q->endpoint == e->cur)
			e->cur = (e->cur + 1) % e->n_endpoints;
	} else {
		doc = json_loadb(q->rx ? q->rx : "", q->rx_len, 0, &jerr);
		if (!json_is_object(doc))
			r.status = locus_error_set(&r.err, LOCUS_EPROTO, "etcd %s: HTTP %ld, not a "
						   "JSON object: %s", where, http, jerr.text);
		else if (http != 200 || json_object_get(doc, "error"))
			gateway_error(doc, http, &r, where);
		else if (parse_answer(q, doc, &r) < 0)
			r.status = locus_error_set(&r.err, LOCUS_EPROTO, "etcd %s: a key or value "
						   "is not base64 text", where);
	}
	if (q->done)
		q->done(q->arg, &r);
	json_decref(doc);
}

int locus_etcd_poll(struct locus_etcd *e)
{
	int running = 0, left;
	CURLMsg *m;

	e->in_perform = 1;
	curl_multi_perform(e->multi, &running);
	e->in_perform = 0;
	while ((m = curl_multi_info_read(e->multi, &left))) {
		struct locus_etcd_req *q = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&q);
		q->finished = 1;
		if (q->watch)
			etcd_watch_finish(e, q, m->data.result);
		else
			finish(e, q, m->data.result);
		if (!q->keep)
			etcd_req_free(e, q);
	}
	etcd_watch_sweep(e);
	left = 0;
	for (struct locus_etcd_req *q = e->reqs; q; q = q->next)
		left += !q->finished;
	return left;
}

void locus_etcd_wait(struct locus_etcd *e, int timeout_ms)
{
	int n;

	curl_multi_poll(e->multi, NULL, 0, timeout_ms, &n);
}

/* ---- bodies ---- */

/* A range_end for every key starting with key: the key with its last byte + 1. */
static char *range_end_b64(const char *key)
{
	size_t n = strlen(key);
	char buf[LOCUS_ETCD_KEY_MAX];

	memcpy(buf, key, n);
	while (n && (unsigned char)buf[n - 1] == 0xff)
		n--;
	if (!n)
		return etcd_b64("\0", 1); /* every key */
	buf[n - 1]++;
	return etcd_b64(buf, n);
}

static int key_ok(const char *key, struct locus_error *err)
{
	size_t n = key ? strlen(key) : 0;

	if (!n || n >= LOCUS_ETCD_KEY_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "etcd: key of %zu bytes (1..%d)", n,
				       LOCUS_ETCD_KEY_MAX - 1);
	return 0;
}

/* Set name to base64(buf) in o. */
static int set_b64(json_t *o, const char *name, const void *buf, size_t len)
{
	char *s = etcd_b64(buf, len);
	int ret = s ? json_object_set_new(o, name, json_string(s)) : -1;

	free(s);
	return ret < 0 ? -ENOMEM : 0;
}

static int set_i64(json_t *o, const char *name, int64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%lld", (long long)v);
	return json_object_set_new(o, name, json_string(s)) < 0 ? -ENOMEM : 0;
}

/* The JSON of op for its own endpoint (kv/range, put, deleterange) or a txn branch. */
static json_t *op_json(const struct locus_etcd_op *op, struct locus_error *err)
{
	json_t *o = json_object();
	int ret;

	if (!o)
		return NULL;
	if (key_ok(op->key, err) < 0)
		goto err_free;
	ret = set_b64(o, "key", op->key, strlen(op->key));
	if (!ret && op->prefix && op->type != LOCUS_ETCD_PUT) {
		char *end = range_end_b64(op->key);

		ret = end ? json_object_set_new(o, "range_end", json_string(end)) : -ENOMEM;
		free(end);
	}
	if (!ret && op->type == LOCUS_ETCD_PUT) {
		if (op->len > LOCUS_ETCD_VALUE_MAX / 2) {
			locus_error_set(err, LOCUS_ERANGE, "etcd: a value of %zu bytes", op->len);
			goto err_free;
		}
		ret = set_b64(o, "value", op->value ? op->value : "", op->len);
		if (!ret && op->lease)
			ret = set_i64(o, "lease", op->lease);
	}
	if (!ret && op->prev_kv)
		ret = json_object_set_new(o, "prev_kv", json_true());
	if (ret < 0) {
		locus_error_set(err, ENOMEM, "etcd: out of memory for a request");
		goto err_free;
	}
	return o;

err_free:
	json_decref(o);
	return NULL;
}

static const char *op_path(enum locus_etcd_optype t)
{
	return t == LOCUS_ETCD_GET ? "/v3/kv/range" : t == LOCUS_ETCD_PUT ? "/v3/kv/put" :
						       "/v3/kv/deleterange";
}

static const char *op_branch(enum locus_etcd_optype t)
{
	return t == LOCUS_ETCD_GET ? "request_range" : t == LOCUS_ETCD_PUT ? "request_put" :
							   "request_delete_range";
}

static int submit(struct locus_etcd *e, const char *path, json_t *body, locus_etcd_done_fn done,
		  void *arg, struct locus_error *err)
{
	char *text = json_dumps(body, JSON_COMPACT);
	struct locus_etcd_req *q;

	json_decref(body);
	q = etcd_req_new(e, path, text, NULL, err);
	if (!q)
		return err && err->code ? -err->code : -ENOMEM;
	q->done = done;
	q->arg = arg;
	return 0;
}

int locus_etcd_op(struct locus_etcd *e, const struct locus_etcd_op *op, locus_etcd_done_fn done,
		  void *arg, struct locus_error *err)
{
	json_t *o = op_json(op, err);

	if (!o)
		return err && err->code ? -err->code : -ENOMEM;
	return submit(e, op_path(op->type), o, done, arg, err);
}

static int cmp_json(json_t *arr, const struct locus_etcd_cmp *c, struct locus_error *err)
{
	static const char *const target[] = { "CREATE", "MOD", "VERSION", "VALUE" };
	static const char *const result[] = { "EQUAL", "NOT_EQUAL", "LESS", "GREATER" };
	static const char *const field[] = { "create_revision", "mod_revision", "version" };
	json_t *o = json_object();
	int ret;

	if (!o)
		return -ENOMEM;
	if ((ret = key_ok(c->key, err)) < 0 || (unsigned)c->target > LOCUS_ETCD_VALUE ||
	    (unsigned)c->result > LOCUS_ETCD_GT) {
		json_decref(o);
		return ret < 0 ? ret : locus_error_set(err, EINVAL, "etcd: a bad compare");
	}
	ret = set_b64(o, "key", c->key, strlen(c->key));
	if (!ret)
		ret = json_object_set_new(o, "target", json_string(target[c->target]));
	if (!ret)
		ret = json_object_set_new(o, "result", json_string(result[c->result]));
	if (!ret)
		ret = c->target == LOCUS_ETCD_VALUE ? set_b64(o, "value", c->value ? c->value : "",
							      c->len) :
						      set_i64(o, field[c->target], c->rev);
	if (!ret && c->prefix) {
		char *end = range_end_b64(c->key);

		ret = end ? json_object_set_new(o, "range_end", json_string(end)) : -ENOMEM;
		free(end);
	}
	if (!ret)
		ret = json_array_append_new(arr, o) < 0 ? -ENOMEM : 0;
	else
		json_decref(o);
	return ret < 0 ? -ENOMEM : 0;
}

static int branch_json(json_t *arr, const struct locus_etcd_op *ops, size_t n,
		       struct locus_error *err)
{
	for (size_t i = 0; i < n; i++) {
		json_t *o = op_json(&ops[i], err), *w = json_object();

		if (!o || !w || json_object_set_new(w, op_branch(ops[i].type), o) < 0 ||
		    json_array_append_new(arr, w) < 0) {
			if (!o)
				json_decref(w);
			return err && err->code ? -err->code : -ENOMEM;
		}
	}
	return 0;
}

int locus_etcd_txn(struct locus_etcd *e, const struct locus_etcd_txn *t, locus_etcd_done_fn done,
		   void *arg, struct locus_error *err)
{
	json_t *body = json_object(), *cmp = json_array(), *ok = json_array(), *ko = json_array();
	int ret = body && cmp && ok && ko ? 0 : -ENOMEM;

	for (size_t i = 0; !ret && i < t->n_cmp; i++)
		ret = cmp_json(cmp, &t->cmp[i], err);
	if (!ret)
		ret = branch_json(ok, t->success, t->n_success, err);
	if (!ret)
		ret = branch_json(ko, t->failure, t->n_failure, err);
	if (!ret && (json_object_set(body, "compare", cmp) < 0 ||
		     json_object_set(body, "success", ok) < 0 ||
		     json_object_set(body, "failure", ko) < 0))
		ret = -ENOMEM;
	json_decref(cmp);
	json_decref(ok);
	json_decref(ko);
	if (ret < 0) {
		json_decref(body);
		return ret;
	}
	return submit(e, "/v3/kv/txn", body, done, arg, err);
}

static int lease_req(struct locus_etcd *e, const char *path, const char *field, int64_t v,
		     locus_etcd_done_fn done, void *arg, struct locus_error *err)
{
	json_t *body = json_object();

	if (!body || set_i64(body, field, v) < 0) {
		json_decref(body);
		return locus_error_set(err, ENOMEM, "etcd: out of memory for a request");
	}
	return submit(e, path, body, done, arg, err);
}

int locus_etcd_lease_grant(struct locus_etcd *e, int64_t ttl_s, locus_etcd_done_fn done,
			   void *arg, struct locus_error *err)
{
	if (ttl_s < 1 || ttl_s > 3600)
		return locus_error_set(err, LOCUS_ERANGE, "etcd: lease TTL %lld s (1..3600)",
				       (long long)ttl_s);
	return lease_req(e, "/v3/lease/grant", "TTL", ttl_s, done, arg, err);
}

int locus_etcd_lease_keepalive(struct locus_etcd *e, int64_t id, locus_etcd_done_fn done,
			       void *arg, struct locus_error *err)
{
	return lease_req(e, "/v3/lease/keepalive", "ID", id, done, arg, err);
}

int locus_etcd_lease_revoke(struct locus_etcd *e, int64_t id, locus_etcd_done_fn done,
			    void *arg, struct locus_error *err)
{
	return lease_req(e, "/v3/lease/revoke", "ID", id, done, arg, err);
}

/* ---- blocking forms ---- */

struct waiter {
	struct locus_etcd *e;
	struct locus_etcd_resp *out;
	int done;
};

/* Keep the answer's kvs: the request's store moves to the caller. */
static void on_wait_done(void *arg, const struct locus_etcd_resp *r)
{
	struct waiter *w = arg;

	*w->out = *r;
	w->done = 1;
}

static int wait_for(struct locus_etcd *e, struct waiter *w, int ret, struct locus_etcd_resp *out)
{
	struct locus_etcd_req *q = e->reqs;

	if (ret < 0) {
		out->status = ret;
		return ret;
	}
	q->keep = 1; /* the newest request is this one: its store outlives the callback */
	while (!w->done) {
		locus_etcd_poll(e);
		if (!w->done)
			locus_etcd_wait(e, 100);
	}
	/* hand the store over: resp_free frees what kvs point at */
	out->kvs = q->store.kvs;
	out->n_kvs = q->store.n;
	q->store.kvs = NULL;
	q->store.n = q->store.cap = 0;
	etcd_req_free(e, q);
	return out->status;
}

int locus_etcd_call_op(struct locus_etcd *e, const struct locus_etcd_op *op,
		       struct locus_etcd_resp *out)
{
	struct waiter w = { e, out, 0 };

	memset(out, 0, sizeof(*out));
	return wait_for(e, &w, locus_etcd_op(e, op, on_wait_done, &w, &out->err), out);
}

int locus_etcd_call_txn(struct locus_etcd *e, const struct locus_etcd_txn *t,
			struct locus_etcd_resp *out)
{
	struct waiter w = { e, out, 0 };

	memset(out, 0, sizeof(*out));
	return wait_for(e, &w, locus_etcd_txn(e, t, on_wait_done, &w, &out->err), out);
}

int locus_etcd_call_lease(struct locus_etcd *e, int what, int64_t arg, struct locus_etcd_resp *out)
{
	struct waiter w = { e, out, 0 };
	int ret;

	memset(out, 0, sizeof(*out));
	ret = what == LOCUS_ETCD_LEASE_GRANT ?
		      locus_etcd_lease_grant(e, arg, on_wait_done, &w, &out->err) :
	      what == LOCUS_ETCD_LEASE_KEEPALIVE ?
		      locus_etcd_lease_keepalive(e, arg, on_wait_done, &w, &out->err) :
		      locus_etcd_lease_revoke(e, arg, on_wait_done, &w, &out->err);
	return wait_for(e, &w, ret, out);
}

void locus_etcd_resp_free(struct locus_etcd_resp *r)
{
	struct etcd_store s = { .kvs = (struct locus_etcd_kv *)r->kvs, .n = r->n_kvs };

	etcd_store_free(&s);
	r->kvs = NULL;
	r->n_kvs = 0;
}
