// SPDX-License-Identifier: MIT
/* A strict little JSON parser for tests; see mini_json.h. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "mini_json.h"

#define MJ_MAX_DEPTH 64

struct mj_in {
	const char *p;
	int depth;
};

static int parse_value(struct mj_in *in, struct mj_val *v);

static void skip_ws(struct mj_in *in)
{
	while (*in->p == ' ' || *in->p == '\t' || *in->p == '\n' || *in->p == '\r')
		in->p++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int parse_string(struct mj_in *in, char **out)
{
	size_t cap = 16, n = 0;
	char *s;

	if (*in->p != '"')
		return -1;
	in->p++;
	s = malloc(cap);
	if (!s)
		return -1;
	for (;;) {
		unsigned char c = (unsigned char)*in->p++;

		if (n + 2 > cap) {
			char *t = realloc(s, cap *= 2);

			if (!t)
				goto err;
			s = t;
		}
		if (c == '"')
			break;
		if (c < 0x20)
			goto err; /* raw control characters (and NUL) are not allowed */
		if (c != '\\') {
			s[n++] = (char)c;
			continue;
		}
		c = (unsigned char)*in->p++;
		switch (c) {
		case '"': case '\\': case '/':
			s[n++] = (char)c;
			break;
		case 'b': s[n++] = '\b'; break;
		case 'f': s[n++] = '\f'; break;
		case 'n': s[n++] = '\n'; break;
		case 'r': s[n++] = '\r'; break;
		case 't': s[n++] = '\t'; break;
		case 'u': {
			int cp = 0;

			for (int i = 0; i < 4; i++) {
				int h = hexval(in->p[i]);

				if (h < 0)
					goto err;
				cp = cp * 16 + h;
			}
			in->p += 4;
			s[n++] = cp < 0x80 ? (char)cp : '?';
			break;
		}
		default:
			goto err;
		}
	}
	s[n] = '\0';
	*out = s;
	return 0;
err:
	free(s);
	return -1;
}

static int parse_number(struct mj_in *in, struct mj_val *v)
{
	const char *start = in->p, *q = in->p;

	if (*q == '-')
		q++;
	if (*q == '0')
		q++;
	else if (*q >= '1' && *q <= '9')
		while (isdigit((unsigned char)*q))
			q++;
	else
		return -1;
	if (*q == '.') {
		q++;
		if (!isdigit((unsigned char)*q))
			return -1;
		while (isdigit((unsigned char)*q))
			q++;
	}
	if (*q == 'e' || *q == 'E') {
		q++;
		if (*q == '+' || *q == '-')
			q++;
		if (!isdigit((unsigned char)*q))
			return -1;
		while (isdigit((unsigned char)*q))
			q++;
	}
	v->t = MJ_NUM;
	v->s = strndup(start, (size_t)(q - start));
	if (!v->s)
		return -1;
	v->num = strtod(v->s, NULL);
	in->p = q;
	return 0;
}

static int add_member(struct mj_val *v, size_t *cap)
{
	if (v->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 8;
		struct mj_val *k = realloc(v->kid, nc * sizeof(*k));

		if (!k)
			return -1;
		v->kid = k;
		if (v->t == MJ_OBJ) {
			char **kk = realloc(v->key, nc * sizeof(*kk));

			if (!kk)
				return -1;
			v->key = kk;
		}
		*cap = nc;
	}
	memset(&v->kid[v->n], 0, sizeof(v->kid[0]));
	if (v->t == MJ_OBJ)
		v->key[v->n] = NULL;
	v->n++;
	return 0;
}

static int parse_container(struct mj_in *in, struct mj_val *v, char close)
{
	size_t cap = 0;

	v->t = close == '}' ? MJ_OBJ : MJ_ARR;
	in->p++;
	if (++in->depth > MJ_MAX_DEPTH)
		return -1;
	skip_ws(in);
	if (*in->p == close) {
		in->p++;
		in->depth--;
		return 0;
	}
	for (;;) {
		if (add_member(v, &cap) < 0)
			return -1;
		skip_ws(in);
		if (v->t == MJ_OBJ) {
			if (parse_string(in, &v->key[v->n - 1]) < 0)
				return -1;
			skip_ws(in);
			if (*in->p++ != ':')
				return -1;
		}
		if (parse_value(in, &v->kid[v->n - 1]) < 0)
			return -1;
		skip_ws(in);
		if (*in->p == ',') {
			in->p++;
			continue;
		}
		if (*in->p++ != close)
			return -1;
		in->depth--;
		return 0;
	}
}

static int parse_value(struct mj_in *in, struct mj_val *v)
{
	skip_ws(in);
	memset(v, 0, sizeof(*v));
	switch (*in->p) {
	case '{':
		return parse_container(in, v, '}');
	case '[':
		return parse_container(in, v, ']');
	case '"':
		v->t = MJ_STR;
		return parse_string(in, &v->s);
	case 't':
		if (strncmp(in->p, "true", 4))
			return -1;
		in->p += 4;
		v->t = MJ_BOOL;
		v->b = 1;
		return 0;
	case 'f':
		if (strncmp(in->p, "false", 5))
			return -1;
		in->p += 5;
		v->t = MJ_BOOL;
		return 0;
	case 'n':
		if (strncmp(in->p, "null", 4))
			return -1;
		in->p += 4;
		v->t = MJ_NULL;
		return 0;
	}
	return parse_number(in, v);
}

int mj_parse(const char *text, struct mj_val *out, const char **end)
{
	struct mj_in in = { .p = text };
	int rc = parse_value(&in, out);

	if (rc < 0) {
		/* in.p may have stepped past the terminating NUL: never read on */
		if (end)
			*end = text;
		mj_free(out);
		return -1;
	}
	skip_ws(&in);
	if (end)
		*end = in.p;
	return 0;
}

const struct mj_val *mj_get(const struct mj_val *o, const char *key)
{
	if (!o || o->t != MJ_OBJ)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (o->key[i] && strcmp(o->key[i], key) == 0)
			return &o->kid[i];
	return NULL;
}

const struct mj_val *mj_at(const struct mj_val *a, size_t i)
{
	if (!a || a->t != MJ_ARR || i >= a->n)
		return NULL;
	return &a->kid[i];
}

void mj_free(struct mj_val *v)
{
	for (size_t i = 0; i < v->n; i++) {
		mj_free(&v->kid[i]);
		if (v->t == MJ_OBJ)
			free(v->key[i]);
	}
	free(v->kid);
	free(v->key);
	free(v->s);
	memset(v, 0, sizeof(*v));
}
