// SPDX-License-Identifier: MIT
/* Node records (locus_cluster.h): JSON, checked field by field. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_cluster.h"
#include "locus_err_priv.h"

/* "a.b.c.d:port" with a port in 1..65535. */
static int parse_addr(const char *s, uint32_t *ipv4, uint16_t *port)
{
	char host[16], tail;
	unsigned p;
	const char *colon = s ? strrchr(s, ':') : NULL;
	struct in_addr a;

	if (!colon || colon - s >= (long)sizeof(host) || colon == s)
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	if (inet_pton(AF_INET, host, &a) != 1 || sscanf(colon + 1, "%u%c", &p, &tail) != 1 ||
	    !p || p > 65535 || colon[1] < '0' || colon[1] > '9')
		return -1;
	*ipv4 = a.s_addr;
	*port = (uint16_t)p;
	return 0;
}

/* An unsigned integer field, as a JSON number or a decimal string (64-bit ids). */
static int get_u64(const json_t *o, const char *name, uint64_t max, uint64_t *out)
{
	const json_t *v = json_object_get(o, name);
	char *end;

	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    (uint64_t)json_integer_value(v) <= max) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		unsigned long long x;

		if (!*s || *s == '-' || *s == '+' || *s == ' ')
			return -1;
		errno = 0;
		x = strtoull(s, &end, 0);
		if (errno || *end || x > max)
			return -1;
		*out = x;
		return 0;
	}
	return -1;
}

int locus_node_record_parse(const void *buf, size_t len, uint32_t node, uint64_t cluster,
			    struct locus_node_record *out, struct locus_error *err)
{
	json_error_t jerr;
	json_t *doc, *rails, *v;
	const char *state, *host;
	uint64_t x;
	size_t i;
	int ret = -LOCUS_EPARSE;

	memset(out, 0, sizeof(*out));
	if (len > LOCUS_CLUSTER_RECORD_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "node %u's record: %zu bytes (at most %d)",
				       node, len, LOCUS_CLUSTER_RECORD_MAX);
	doc = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(doc)) {
		locus_error_set(err, LOCUS_EPARSE, "node %u's record is not a JSON object: %s",
				node, doc ? "another JSON value" : jerr.text);
		goto out;
	}
	if (get_u64(doc, "node", UINT32_MAX, &x) < 0 || x != node) {
		locus_error_set(err, LOCUS_EPARSE, "node %u's record names another node (or none)",
				node);
		goto out;
	}
	out->node = node;
	if (get_u64(doc, "cluster", UINT64_MAX, &out->cluster) < 0 || out->cluster != cluster) {
		locus_error_set(err, LOCUS_EPARSE, "node %u's record is of cluster %s, not %" PRIu64,
				node, json_object_get(doc, "cluster") ? "another one" : "none",
				cluster);
		goto out;
	}
	if (get_u64(doc, "proto", UINT32_MAX, &x) < 0) {
		locus_error_set(err, LOCUS_EPARSE, "node %u's record has no protocol version",
				node);
		goto out;
	}
	out->proto = (uint32_t)x;
	if (out->proto != LOCUS_CLUSTER_PROTO) {
		ret = locus_error_set(err, LOCUS_EVERSION, "node %u speaks protocol %u, this node %u",
				      node, out->proto, LOCUS_CLUSTER_PROTO);
		goto out;
	}
	if (get_u64(doc, "gpus", 1024, &x) < 0 || !x) {
		locus_error_set(err, LOCUS_EPARSE, "node %u's record: gpus is not 1..1024", node);
		goto out;
	}
	out->gpus = (uint32_t)x;
	rails = json_object_get(doc, "rails");
	if (!json_is_array(rails) || !json_array_size(rails) ||
	    json_array_size(rails) > LOCUS_CLUSTER_MAX_RAILS) {
		locus_error_set(err, LOCUS_EPARSE, "node %u's record: rails is not a list of 1..%d "
				"addresses", node, LOCUS_CLUSTER_MAX_RAILS);
		goto out;
	}
	json_array_foreach(rails, i, v) {
		if (parse_addr(json_string_value(v), &out->rail_ipv4[i], &out->rail_port[i]) < 0) {
			locus_error_set(err, LOCUS_EPARSE, "node %u's record: rail %zu is not "
					"IPv4:port", node, i);
			goto out;
		}
	}
	out->n_rails = (uint32_t)json_array_size(rails);
	state = json_string_value(json_object_get(doc, "state"));
	if (!state || (strcmp(state, "up") && strcmp(state, "draining"))) {
		locus_error_set(err, LOCUS_EPARSE, "node %u's record: state is not up or draining",
				node);
		goto out;
	}
	out->draining = !strcmp(state, "draining");
	if (get_u64(doc, "boot", UINT64_MAX, &out->boot) < 0 || !out->boot) {
		locus_error_set(err, LOCUS_EPARSE, "node %u's record: no boot id", node);
		goto out;
	}
	host = json_string_value(json_object_get(doc, "host"));
	if (host)
		snprintf(out->host, sizeof(out->host), "%s", host);
	ret = 0;
out:
	json_decref(doc);
	return ret;
}

int locus_node_record_format(const struct locus_node_record *r, char *buf, size_t len)
{
	size_t n;
	int k;

	k = snprintf(buf, len, "{\"node\":%u,\"cluster\":\"%" PRIu64 "\",\"proto\":%u,\"gpus\":%u,"
		     "\"rails\":[", r->node, r->cluster, r->proto, r->gpus);
	if (k < 0 || (size_t)k >= len)
		return -LOCUS_ERANGE;
	n = (size_t)k;
	for (uint32_t i = 0; i < r->n_rails; i++) {
		char ip[INET_ADDRSTRLEN];
		struct in_addr a = { .s_addr = r->rail_ipv4[i] };

		inet_ntop(AF_INET, &a, ip, sizeof(ip));
		k = snprintf(buf + n, len - n, "%s\"%s:%u\"", i ? "," : "", ip, r->rail_port[i]);
		if (k < 0 || (size_t)k >= len - n)
			return -LOCUS_ERANGE;
		n += (size_t)k;
	}
	/* the host name goes through jansson: it may hold anything */
	{
		json_t *h = json_string(r->host);
		char *hs = h ? json_dumps(h, JSON_ENCODE_ANY) : NULL;

		k = hs ? snprintf(buf + n, len - n, "],\"state\":\"%s\",\"boot\":\"%" PRIu64 "\","
				  "\"host\":%s}", r->draining ? "draining" : "up", r->boot, hs) : -1;
		free(hs);
		json_decref(h);
	}
	if (k < 0 || (size_t)k >= len - n)
		return -LOCUS_ERANGE;
	return (int)(n + (size_t)k);
}
