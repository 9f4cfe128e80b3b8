// SPDX-License-Identifier: MIT
/*
 * Watches (locus_etcd.h): one streaming POST /v3/watch each. The gateway
 * writes one JSON object per line; each is a batch of events, a progress
 * notice, or the watch's creation or cancellation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_priv.h"
#include "locus_err_priv.h"

#define WATCH_LINE_MAX (2 * (size_t)LOCUS_ETCD_VALUE_MAX)

struct locus_etcd_watch {
	struct locus_etcd_req *q;
	locus_etcd_events_fn events;
	locus_etcd_end_fn end;
	void *arg;
	int64_t revision;        /* everything up to it was delivered */
	char *buf;               /* an unfinished line */
	size_t len, cap;
	uint8_t cancelled, ended;
	struct locus_error why;  /* set when the stream itself said why it ends */
	int status;
	int64_t compact_rev;
};

static void end_once(struct locus_etcd_watch *w, int status, int64_t compact)
{
	if (w->cancelled || w->ended)
		return;
	w->ended = 1;
	if (w->end)
		w->end(w->arg, status, compact, &w->why);
}

/* One line of the stream. Returns 0, or -1 to stop the transfer. */
static int on_line(struct locus_etcd_watch *w, const char *line, size_t n)
{
	json_error_t jerr;
	json_t *doc = json_loadb(line, n, 0, &jerr), *res, *evs;
	struct etcd_store st = { 0 };
	struct locus_etcd_event *ev = NULL;
	size_t i, n_ev = 0;
	json_t *o;
	int ret = 0;

	if (!json_is_object(doc)) {
		w->status = locus_error_set(&w->why, LOCUS_EPROTO, "etcd watch: a line is not a "
					    "JSON object: %s", jerr.text);
		ret = -1;
		goto out;
	}
	if (json_object_get(doc, "error")) {
		const json_t *e = json_object_get(doc, "error");
		const char *m = json_string_value(json_object_get(e, "message"));

		w->status = locus_error_set(&w->why, EIO, "etcd watch: %s", m ? m : "error");
		ret = -1;
		goto out;
	}
	res = json_object_get(doc, "result");
	if (json_is_true(json_object_get(res, "canceled"))) {
		const char *why = json_string_value(json_object_get(res, "cancel_reason"));

		w->compact_rev = etcd_i64(res, "compact_revision");
		w->status = w->compact_rev ?
			locus_error_set(&w->why, LOCUS_ERANGE, "etcd watch: revision %lld was "
					"compacted (oldest left %lld)", (long long)(w->revision + 1),
					(long long)w->compact_rev) :
			locus_error_set(&w->why, EIO, "etcd watch cancelled: %s",
					why ? why : "no reason given");
		ret = -1;
		goto out;
	}
	evs = json_object_get(res, "events");
	if (json_is_array(evs) && json_array_size(evs)) {
		ev = calloc(json_array_size(evs), sizeof(*ev));
		if (!ev) {
			w->status = locus_error_set(&w->why, ENOMEM, "etcd watch: out of memory");
			ret = -1;
			goto out;
		}
		json_array_foreach(evs, i, o) {
			const char *type = json_string_value(json_object_get(o, "type"));

			if (etcd_store_kv(&st, json_object_get(o, "kv")) < 0) {
				w->status = locus_error_set(&w->why, LOCUS_EPROTO, "etcd watch: an "
							    "event without a base64 key");
				ret = -1;
				goto out;
			}
			ev[n_ev].type = type && !strcmp(type, "DELETE") ? LOCUS_ETCD_EV_DELETE :
									  LOCUS_ETCD_EV_PUT;
			n_ev++;
		}
		for (i = 0; i < n_ev; i++) {
			ev[i].kv = st.kvs[i];
			if (ev[i].kv.mod_rev > w->revision)
				w->revision = ev[i].kv.mod_rev;
		}
		if (w->events)
			w->events(w->arg, w->revision, ev, n_ev);
	} else {
		/* created, or a progress notice: everything up to the header's revision is known */
		int64_t rev = etcd_i64(json_object_get(res, "header"), "revision");

		if (rev > w->revision)
			w->revision = rev;
	}
out:
	etcd_store_free(&st);
	free(ev);
	json_decref(doc);
	return w->cancelled ? -1 : ret;
}

size_t etcd_watch_data(struct locus_etcd_req *q, const char *data, size_t n)
{
	struct locus_etcd_watch *w = q->watch;
	size_t start = 0;

	if (w->cancelled || w->ended)
		return 0;
	if (w->len + n > WATCH_LINE_MAX) {
		w->status = locus_error_set(&w->why, LOCUS_ERANGE, "etcd watch: a line over %zu "
					    "bytes", WATCH_LINE_MAX);
		return 0;
	}
	if (w->len + n + 1 > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		char *nb;

		while (cap < w->len + n + 1)
			cap *= 2;
		nb = realloc(w->buf, cap);
		if (!nb)
			return 0;
		w->buf = nb;
		w->cap = cap;
	}
	memcpy(w->buf + w->len, data, n);
	w->len += n;
	for (size_t i = 0; i < w->len; i++) {
		if (w->buf[i] != '\n')
			continue;
		if (i > start && on_line(w, w->buf + start, i - start) < 0)
			return 0;
		start = i + 1;
	}
	memmove(w->buf, w->buf + start, w->len - start);
	w->len -= start;
	return n;
}

void etcd_watch_finish(struct locus_etcd *e, struct locus_etcd_req *q, CURLcode cc)
{
	struct locus_etcd_watch *w = q->watch;
	const char *ep = e->endpoint[q->endpoint];
	long http = 0;

	if (w->cancelled || w->ended)
		return;
	curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &http);
	if (!w->status) {
		int ret = cc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT :
			  cc == CURLE_OK || cc == CURLE_COULDNT_CONNECT ||
			  cc == CURLE_GOT_NOTHING || cc == CURLE_RECV_ERROR ||
			  cc == CURLE_SEND_ERROR || cc == CURLE_PARTIAL_FILE ? ENOTCONN :
			  cc == CURLE_SSL_CONNECT_ERROR || cc == CURLE_PEER_FAILED_VERIFICATION ?
									     EACCES : EIO;

		if (cc == CURLE_OK && http != 200)
			ret = EIO;
		w->status = locus_error_set(&w->why, ret, "etcd %s watch: %s", ep,
					    cc == CURLE_OK ? http == 200 ? "the stream ended" :
							     "refused" :
							     curl_easy_strerror(cc));
		if (q->endpoint == e->cur)
			e->cur = (e->cur + 1) % e->n_endpoints;
	}
	end_once(w, w->status, w->compact_rev);
}

void etcd_watch_sweep(struct locus_etcd *e)
{
	struct locus_etcd_req *q = e->reqs, *next;

	for (; q; q = next) {
		next = q->next;
		if (q->watch && q->watch->cancelled)
			etcd_req_free(e, q);
	}
}

int locus_etcd_watch(struct locus_etcd *e, const char *key, bool prefix, int64_t start_rev,
		     locus_etcd_events_fn events, locus_etcd_end_fn end, void *arg,
		     struct locus_etcd_watch **out, struct locus_error *err)
{
	struct locus_etcd_watch *w = calloc(1, sizeof(*w));
	json_t *body = json_object(), *cr = json_object();
	char *k = NULL, *re = NULL, rev[24];
	size_t n = key ? strlen(key) : 0;
	int ret = -ENOMEM;

	*out = NULL;
	if (!w || !body || !cr)
		goto err_free;
	if (!n || n >= LOCUS_ETCD_KEY_MAX || start_rev < 0) {
		ret = locus_error_set(err, LOCUS_ERANGE, "etcd watch: key of %zu bytes (1..%d), "
				      "start revision %lld", n, LOCUS_ETCD_KEY_MAX - 1,
				      (long long)start_rev);
		goto err_free;
	}
	k = etcd_b64(key, n);
	if (prefix) {
		char last[LOCUS_ETCD_KEY_MAX];
		size_t m = n;

		memcpy(last, key, n);
		while (m && (unsigned char)last[m - 1] == 0xff)
			m--;
		if (m)
			last[m - 1]++;
		re = m ? etcd_b64(last, m) : etcd_b64("\0", 1);
	}
	snprintf(rev, sizeof(rev), "%lld", (long long)start_rev);
	if (!k || (prefix && !re) || json_object_set_new(cr, "key", json_string(k)) < 0 ||
	    (re && json_object_set_new(cr, "range_end", json_string(re)) < 0) ||
	    (start_rev && json_object_set_new(cr, "start_revision", json_string(rev)) < 0) ||
	    json_object_set_new(cr, "progress_notify", json_true()) < 0 ||
	    json_object_set(body, "create_request", cr) < 0)
		goto err_free;
	w->events = events;
	w->end = end;
	w->arg = arg;
	w->revision = start_rev ? start_rev - 1 : 0;
	w->q = etcd_req_new(e, "/v3/watch", json_dumps(body, JSON_COMPACT), w, err);
	if (!w->q) {
		ret = err && err->code ? -err->code : -ENOMEM;
		goto err_free;
	}
	snprintf(w->q->what, sizeof(w->q->what), "POST /v3/watch");
	json_decref(cr);
	json_decref(body);
	free(k);
	free(re);
	*out = w;
	return 0;

err_free:
	if (ret == -ENOMEM)
		locus_error_set(err, ENOMEM, "etcd watch: out of memory");
	json_decref(cr);
	json_decref(body);
	free(k);
	free(re);
	free(w);
	return ret;
}

void etcd_watch_free(struct locus_etcd_watch *w)
{
	if (w) {
		free(w->buf);
		free(w);
	}
}

void locus_etcd_watch_cancel(struct locus_etcd_watch *w)
{
	struct locus_etcd *e;

	if (!w)
		return;
	e = w->q->e;
	w->cancelled = 1;
	/* inside curl's callbacks the handle stays: etcd_watch_sweep frees it after */
	if (!e->in_perform)
		etcd_req_free(e, w->q);
}

int64_t locus_etcd_watch_revision(const struct locus_etcd_watch *w)
{
	return w->revision;
}
