/* SPDX-License-Identifier: MIT */
/*
 * A strict little JSON parser for tests (RFC 8259 grammar; \u escapes
 * outside ASCII decode to '?'). Numbers keep their text so 64-bit integers
 * can be compared exactly.
 */
#ifndef MINI_JSON_H
#define MINI_JSON_H

#include <stddef.h>

enum mj_type { MJ_NULL, MJ_BOOL, MJ_NUM, MJ_STR, MJ_ARR, MJ_OBJ };

struct mj_val {
	enum mj_type t;
	char *s;               /* MJ_STR: decoded text; MJ_NUM: the number's text */
	double num;            /* MJ_NUM */
	int b;                 /* MJ_BOOL */
	size_t n;              /* MJ_ARR, MJ_OBJ: members */
	struct mj_val *kid;    /* members' values */
	char **key;            /* MJ_OBJ: members' keys */
};

/*
 * Parse one JSON value from text, skipping whitespace around it; *end (may be
 * NULL) receives where parsing stopped. Returns 0, or -1 on a syntax error.
 */
int mj_parse(const char *text, struct mj_val *out, const char **end);

/* Member key of an object, element i of an array; NULL if absent. */
const struct mj_val *mj_get(const struct mj_val *o, const char *key);
const struct mj_val *mj_at(const struct mj_val *a, size_t i);

void mj_free(struct mj_val *v);

#endif /* MINI_JSON_H */
