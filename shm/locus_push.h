/* SPDX-License-Identifier: MIT */
/*
 * Table pushes: how the control plane hands a table to locusd.
 *
 * The table channels (locus_table.h) live in locusd's private memory: no
 * other process maps them, so no client can write a table slot, and no
 * process but locusd ever writes the bytes its readers validated. A push
 * goes over the control socket <dir>/locus.<instance>.ctl (dir as for the
 * registration socket, locus_shm_run_path): SOCK_SEQPACKET, one request and
 * one reply per connection, the table itself in a sealed memfd passed with
 * SCM_RIGHTS (a table may be far larger than a socket message).
 *
 * locusd's main lcore checks the sender (SO_PEERCRED, SO_PEERGROUPS): root,
 * locusd's own user, or a member of the control group (config ctl_group,
 * "locus-ctl" by default) may push; anyone else who can reach the socket
 * (mode 0660, the service group) is refused with -EACCES, counted in
 * table_pushes_refused{reason="0"} and logged with its uid and pid. An
 * accepted table is copied into a free slot, published (validation before
 * the switch, quiescent-state slot reuse: locus_table.h), and the reply
 * comes once every live reader adopted or refused it, or the timeout ran
 * out. A sender killed at any point leaves either the old table in force
 * (nothing reached locusd) or the new one adopted whole (locusd had the
 * request): never a part of one.
 */
#ifndef LOCUS_PUSH_H
#define LOCUS_PUSH_H

#include <stddef.h>
#include <stdint.h>

#include "locus_common.h"
#include "locus_err.h"
#include "locus_table.h"

#define LOCUS_PUSH_MAGIC       0x48535550u /* "PUSH" */
#define LOCUS_PUSH_VERSION     1u
#define LOCUS_PUSH_SOCK_SUFFIX ".ctl"
#define LOCUS_PUSH_MSG_MAX     192

enum locus_push_op {
	LOCUS_PUSH_TABLE  = 1, /* one fd: a memfd sealed against writes and shrinking */
	LOCUS_PUSH_STATUS = 2, /* the published generation of every channel */
};

/* Why a request was refused: the index of table_pushes_refused. */
enum locus_push_refusal {
	LOCUS_PUSHREF_PERM      = 0, /* the sender is not in the control group */
	LOCUS_PUSHREF_MALFORMED = 1, /* size, magic, version, op, fd count, fd kind */
	LOCUS_PUSHREF_RANGE     = 2, /* channel, length (0, > slot, > the fd's size) */
	LOCUS_PUSHREF_BUSY      = 3, /* a push to the channel in progress, no free slot in time */
	LOCUS_PUSHREF_IO        = 4, /* reading the table from the fd failed */
	LOCUS_PUSHREF_N
};

struct locus_push_req {
	uint32_t magic;       /* LOCUS_PUSH_MAGIC */
	uint32_t version;     /* LOCUS_PUSH_VERSION */
	uint32_t op;          /* enum locus_push_op */
	uint32_t channel;     /* TABLE: the table channel */
	uint64_t len;         /* TABLE: bytes of table at the start of the fd */
	uint32_t timeout_ms;  /* TABLE: bound on a free slot and on the readers; 0 = 2000 */
	uint32_t reserved;    /* 0 */
};

struct locus_push_rep {
	uint32_t magic;
	uint32_t version;
	int32_t  status;      /* 0, or -code: refused before publishing (msg says why) */
	uint32_t channel;
	uint64_t generation;  /* TABLE: the generation published */
	/* TABLE: the readers' verdict, as locus_table_wait reports it */
	uint32_t n_live;
	uint32_t n_adopted;
	uint32_t n_refused;
	int32_t  refused_reader;
	uint64_t refused_gen;
	int32_t  refused_code;
	uint32_t timed_out;   /* 1: not every reader decided within the timeout */
	uint32_t n_channels;  /* STATUS */
	uint32_t reserved;
	uint64_t published[LOCUS_TABLE_MAX_CHANNELS]; /* STATUS: generation of P per channel */
	char     refused_msg[LOCUS_TABLE_REJECT_MSG];
	char     msg[LOCUS_PUSH_MSG_MAX];
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_push_req) == 32, "push request");
LOCUS_STATIC_ASSERT(sizeof(struct locus_push_rep) == 512, "push reply");

/* What a push came to. */
struct locus_push_result {
	uint64_t generation;
	int timed_out;                        /* readers undecided at the timeout */
	struct locus_table_wait_result wait;  /* adopted / refused, first refusal */
};

/* The control socket of instance into buf. 0, -EINVAL, -ENAMETOOLONG. */
int locus_push_sock_path(const char *instance, char *buf, size_t len);

/*
 * Push len bytes of table to channel ch of instance's locusd and wait (up
 * to timeout_ms for a slot and for the readers, 0 = 2000, plus a margin for
 * the answer) for the verdict. Returns 0 with *res once locusd published it
 * (a reader's refusal or a time-out is reported in res, not as an error),
 * or the refusal: -EACCES (not in the control group), -EBUSY, -LOCUS_ERANGE,
 * -ENOENT / -ECONNREFUSED (no locusd listening), -ETIMEDOUT; err says which.
 */
int locus_push_table(const char *instance, unsigned ch, const void *buf, size_t len,
		     uint32_t timeout_ms, struct locus_push_result *res, struct locus_error *err);

/*
 * The generation each channel of instance publishes (0: none yet) into
 * published[0..*n_channels). Same refusals as locus_push_table.
 */
int locus_push_status(const char *instance, uint64_t published[LOCUS_TABLE_MAX_CHANNELS],
		      unsigned *n_channels, struct locus_error *err);

#endif /* LOCUS_PUSH_H */
