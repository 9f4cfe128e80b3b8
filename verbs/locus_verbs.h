/* SPDX-License-Identifier: MIT */
/*
 * locus RDMA transport on rdma-core (libibverbs + librdmacm, RC).
 *
 * One endpoint per process and device: a PD, one CQ shared by every peer, an
 * rdma_cm event channel and (optionally) a listener. Peers are declared by
 * node id; each has its own remote-writable region ("inbox MR") so a peer
 * only ever holds the rkey of the memory meant for it:
 *
 *   inbox MR = slot_count slots of slot_size bytes | 64-byte control block
 *              | area_len bytes of "area" (optional)
 *
 * The peer writes its messages into our slots with WRITE_WITH_IMM. Credits
 * flow the other way through the control blocks: when we release slots of
 * our inbox, we write our cumulative released count (8 bytes, inline RDMA
 * WRITE without immediate) into the control block of the peer's inbox MR,
 * which the peer reads before it uses a slot. A write rather than
 * piggy-backing on reverse traffic, because the main flows are one-way
 * (signatures go router -> decoder only); and it costs the peer no RECV
 * and no completion. A later, larger cumulative value is always correct, so
 * credit writes never need ordering among themselves.
 *
 * The area is a small table the peer rewrites in place by one-sided RDMA
 * WRITEs (locus_verbs_write_area: no immediate, no RECV, no credits, no
 * work for our CPU); we read it whenever we like, so its content must carry
 * its own integrity check (a row may be read half written). Both ends must
 * be configured with the same area_len: the writer aims at the address
 * after the control block the peer announced.
 *
 * A message of n = ceil(len / slot_size) slots is written contiguously. If it
 * does not fit before the end of the ring, the tail slots are skipped (and
 * counted as used). imm = slot index | (n - 1) << 16. A message needs at most
 * slot_count / 2 slots, so the skip never deadlocks.
 *
 * Threading: the control path (locus_verbs_service: rdma_cm events, QP
 * creation and destruction, redials) and the data path (locus_verbs_poll,
 * _post, _release, _flush_credits, _wait: CQ, sends, credits; no syscall but
 * in _wait) either run on one thread, or, with ep_params.threaded, on two:
 * then each peer's connection is handed between them by one atomic word per
 * peer (locus_verbs_link.h): control publishes a connection once its QP is
 * ready, the data side acks a closing one once nothing of it is in flight,
 * and only then is the QP destroyed. No lock on either side. Peers are
 * declared (locus_verbs_peer_add) before the data thread starts, and the
 * endpoint is destroyed after it stopped.
 */
#ifndef LOCUS_VERBS_H
#define LOCUS_VERBS_H

#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>

#include "locus_common.h"
#include "locus_err.h"
#include "locus_verbs_dev.h"

/* ------------------------------------------------------------------ */
/* Connection handshake (pure: no verbs dependency; OpenSSL libcrypto) */
/*
 * Protocol version 2 (verbs/README.md, "Handshake", says why each leg is
 * needed): the cluster secret never crosses the wire. Each side proves it
 * knows the secret by an HMAC-SHA-256 keyed with it over one transcript
 * (protocol version, cluster id, both node ids, both QP numbers, both
 * fresh nonces) and the leg's role, so that no proof passes for another
 * leg, another connection, another QP or another cluster:
 *
 *   REQ      rdma_cm, active -> passive   nonce_a, MAC(REQ) (truncated)
 *   REP      rdma_cm, passive -> active   nonce_b, MAC(REP)
 *   HELLO_A  SEND on the QP, active       MAC(HELLO_A), the active's inbox
 *   HELLO_P  SEND on the QP, passive      MAC(HELLO_P), the passive's inbox
 *
 * A side gives its inbox (rkey, address) only to a peer whose MAC over
 * its own fresh nonce it has checked, and uses the peer's only then.
 */

/* moves with every layout the nodes exchange (LOCUS_MSG_VERSION and what
 * follows the header): nodes of two layouts refuse each other here rather
 * than drop each other's messages */
#define LOCUS_VERBS_PROTO_VERSION 4u
#define LOCUS_VERBS_SECRET_LEN    32u
#define LOCUS_VERBS_NONCE_LEN     16u
#define LOCUS_VERBS_MAC_LEN       32u  /* HMAC-SHA-256 */
/*
 * rdma_cm leaves 56 bytes of REQ private data on RoCE / IB (rdma_connect(3):
 * 92 minus its own header) and 196 of REP (rdma_accept(3)): the REQ's MAC
 * is truncated to 24 bytes (192 bits; RFC 4868 truncates to 128).
 */
#define LOCUS_VERBS_REQ_LEN       56u
#define LOCUS_VERBS_REQ_MAC_LEN   24u
#define LOCUS_VERBS_REP_LEN       64u
#define LOCUS_VERBS_PDATA_MAX     64u
#define LOCUS_VERBS_HELLO_LEN     56u
#define LOCUS_VERBS_REPLAY_SLOTS  64u  /* request nonces remembered per peer */
#define LOCUS_VERBS_SLOT_SHIFT_MIN 6u  /* 64 B */
#define LOCUS_VERBS_SLOT_SHIFT_MAX 24u /* 16 MiB */
#define LOCUS_VERBS_SLOTS_MIN     2u
#define LOCUS_VERBS_SLOTS_MAX     32768u
#define LOCUS_VERBS_CTRL_LEN      64u  /* control block after the slots */
#define LOCUS_VERBS_MAX_SGE       16u  /* gather entries per message we ask a QP for */
#define LOCUS_VERBS_AREA_MAX      65536u /* one-sided area after the control block */

/* What a handshake message is; also the role its MAC is computed for. */
enum locus_verbs_pdata_kind {
	LOCUS_VERBS_PD_REQ = 1,     /* connect request (active side) */
	LOCUS_VERBS_PD_REP = 2,     /* accept (passive side) */
	LOCUS_VERBS_HELLO_A = 3,    /* the active side's first message on the QP */
	LOCUS_VERBS_HELLO_P = 4,    /* the passive side's answer to it */
};

/* Reject reasons carried in the REJ private data (one byte + version). */
enum locus_verbs_reject {
	LOCUS_VERBS_REJ_VERSION = 1,
	LOCUS_VERBS_REJ_AUTH    = 2, /* the request's MAC is wrong */
	LOCUS_VERBS_REJ_CLUSTER = 3,
	LOCUS_VERBS_REJ_PEER    = 4, /* unknown node id / not accepted from it / not for us */
	LOCUS_VERBS_REJ_INVALID = 5, /* malformed private data */
	LOCUS_VERBS_REJ_BUSY    = 6, /* resources */
	LOCUS_VERBS_REJ_REPLAY  = 7, /* the request's nonce was seen before */
};

/* Why an authentication leg was refused: the index of the auth_refused counter. */
enum locus_verbs_auth_reason {
	LOCUS_VERBS_AUTH_CLUSTER = 0, /* passive: a request for another cluster */
	LOCUS_VERBS_AUTH_REPLAY,      /* passive: a request whose nonce was seen before */
	LOCUS_VERBS_AUTH_REQ_MAC,     /* passive: the request's MAC is wrong (wrong secret,
				       * altered or replayed from another QP) */
	LOCUS_VERBS_AUTH_REP_MAC,     /* active: the accept's MAC is wrong */
	LOCUS_VERBS_AUTH_HELLO,       /* either: the peer's hello on the QP refused
				       * (MAC, kind, length, fields) */
	LOCUS_VERBS_AUTH_TIMEOUT,     /* either: the peer did not finish proving itself
				       * within the attempt's bound */
	LOCUS_VERBS_AUTH_N
};

/*
 * REQ / REP private data. Wire layout (little-endian; REQ 56 bytes, REP 64):
 *   0 u16 version | 2 u8 kind | 3 u8 0 | 4 u32 cluster_id | 8 u16 from |
 *   10 u16 to | 12 u32 0 | 16 u8 nonce[16] | 32 u8 mac[24 (REQ) or 32 (REP)]
 * from / to: the sender's and the addressee's node ids.
 */
struct locus_verbs_pdata {
	uint16_t version;
	uint8_t kind;
	uint32_t cluster_id;
	uint16_t from, to;
	uint8_t nonce[LOCUS_VERBS_NONCE_LEN];
	uint8_t mac[LOCUS_VERBS_MAC_LEN];  /* REQ: the first LOCUS_VERBS_REQ_MAC_LEN bytes */
};

/*
 * HELLO, the first SEND each side posts on the QP (56 bytes, little-endian):
 *   0 u16 version | 2 u8 kind | 3 u8 slot_shift | 4 u16 from | 6 u16 slot_count |
 *   8 u32 rkey | 12 u32 0 | 16 u64 inbox_addr | 24 u8 mac[32]
 */
struct locus_verbs_hello {
	uint16_t version;
	uint8_t kind;
	uint8_t slot_shift;
	uint16_t from;
	uint16_t slot_count;
	uint32_t rkey;
	uint64_t inbox_addr;
	uint8_t mac[LOCUS_VERBS_MAC_LEN];
};

/*
 * What every MAC covers, both sides' view of one connection attempt. The
 * REQ's MAC is computed before the passive side exists: for role
 * LOCUS_VERBS_PD_REQ passive_qpn and nonce_b count as zero, whatever they hold.
 */
struct locus_verbs_transcript {
	uint16_t version;
	uint32_t cluster_id;
	uint16_t active_node, passive_node;
	uint32_t active_qpn, passive_qpn;
	uint8_t nonce_a[LOCUS_VERBS_NONCE_LEN], nonce_b[LOCUS_VERBS_NONCE_LEN];
};

/* Request nonces a passive side accepted from one peer, most recent last. */
struct locus_verbs_replay {
	uint8_t nonce[LOCUS_VERBS_REPLAY_SLOTS][LOCUS_VERBS_NONCE_LEN];
	uint32_t next, n;
};

/* Serialise p (kind REQ or REP) into buf (LOCUS_VERBS_PDATA_MAX bytes): returns the length. */
size_t locus_verbs_pdata_encode(const struct locus_verbs_pdata *p, uint8_t *buf);

/*
 * Parse len bytes of kind (REQ or REP) into *p: length (bytes past the
 * layout are rdma_cm's padding and ignored), version, kind, the zero
 * fields. Returns 0, -LOCUS_ETRUNCATED, -LOCUS_EVERSION or -LOCUS_EPROTO;
 * err says which field.
 */
int locus_verbs_pdata_decode(const void *buf, size_t len, unsigned kind,
			     struct locus_verbs_pdata *p, struct locus_error *err);

/* Serialise h into buf (LOCUS_VERBS_HELLO_LEN bytes). */
void locus_verbs_hello_encode(const struct locus_verbs_hello *h, uint8_t *buf);

/*
 * Parse a hello of kind (HELLO_A or HELLO_P) from exactly len bytes (a SEND
 * has no padding): length, version, kind, the zero field, slot geometry,
 * an inbox + control block that does not wrap the address space. Returns
 * 0, -LOCUS_ETRUNCATED, -LOCUS_EVERSION, -LOCUS_EPROTO or -LOCUS_ERANGE.
 */
int locus_verbs_hello_decode(const void *buf, size_t len, unsigned kind,
			     struct locus_verbs_hello *h, struct locus_error *err);

/* One piece of an HMAC's message. */
struct locus_verbs_iov {
	const void *base;
	size_t len;
};

/*
 * HMAC-SHA-256 (OpenSSL's EVP_MAC, fed piece by piece) of the n pieces
 * concatenated. Returns 0 or -EIO when libcrypto fails.
 */
int locus_verbs_hmac_sha256(const uint8_t *key, size_t key_len, const struct locus_verbs_iov *msg,
			    unsigned n, uint8_t out[LOCUS_VERBS_MAC_LEN]);

/*
 * The MAC of role (enum locus_verbs_pdata_kind) over t, keyed with the
 * cluster secret. Its message (little-endian):
 *   "locus-verbs-auth" (16 bytes) | u8 role | u16 version | u32 cluster_id |
 *   u16 active_node | u16 passive_node | u32 active_qpn | u32 passive_qpn |
 *   nonce_a[16] | nonce_b[16]
 * Returns 0, -EINVAL (role unknown) or -EIO.
 */
int locus_verbs_auth_mac(const uint8_t secret[LOCUS_VERBS_SECRET_LEN], unsigned role,
			 const struct locus_verbs_transcript *t, uint8_t mac[LOCUS_VERBS_MAC_LEN]);

/* Constant-time equality of n bytes (CRYPTO_memcmp): 1 if equal. */
int locus_verbs_mac_equal(const void *a, const void *b, size_t n);

/* n fresh bytes from OpenSSL's CSPRNG (seeded by the kernel): 0 or -EIO. */
int locus_verbs_nonce(uint8_t *buf, size_t n);

bool locus_verbs_replay_seen(const struct locus_verbs_replay *r,
			     const uint8_t nonce[LOCUS_VERBS_NONCE_LEN]);
/* Remember nonce (the oldest of a full set is forgotten). */
void locus_verbs_replay_add(struct locus_verbs_replay *r, const uint8_t nonce[LOCUS_VERBS_NONCE_LEN]);

/*
 * Passive side: may a decoded request that arrived on the active side's QP
 * t->active_qpn go on? t is our view (our version, cluster and node id,
 * the request's node id and nonce). Refuses, in this order, another
 * cluster, another addressee (-LOCUS_EPROTO), a nonce in seen, a MAC that
 * does not match (compared in constant time). Returns 0, or -LOCUS_EAUTH
 * with *why set (NULL: not wanted) or -LOCUS_EPROTO; err says which.
 */
int locus_verbs_req_admit(const struct locus_verbs_pdata *req, const struct locus_verbs_transcript *t,
			  const uint8_t secret[LOCUS_VERBS_SECRET_LEN],
			  const struct locus_verbs_replay *seen, enum locus_verbs_auth_reason *why,
			  struct locus_error *err);

/*
 * Active side: does the decoded accept prove the passive side? t is our
 * view with the passive's QP number and nonce_b filled in. Refuses another
 * cluster, another sender or addressee (-LOCUS_EPROTO: someone else
 * answers at that address), a wrong MAC. Returns 0, or -LOCUS_EAUTH with
 * *why set (NULL: not wanted) or -LOCUS_EPROTO; err says which.
 */
int locus_verbs_rep_admit(const struct locus_verbs_pdata *rep, const struct locus_verbs_transcript *t,
			  const uint8_t secret[LOCUS_VERBS_SECRET_LEN],
			  enum locus_verbs_auth_reason *why, struct locus_error *err);

/*
 * Either side: is a decoded hello the one peer node `from` owes us on this
 * connection (expect: the MAC computed beforehand)? Pure byte compares, no
 * allocation (the data path calls it). Returns 0, -LOCUS_EPROTO (sender)
 * or -LOCUS_EAUTH (MAC).
 */
int locus_verbs_hello_admit(const struct locus_verbs_hello *h, uint16_t from,
			    const uint8_t expect[LOCUS_VERBS_MAC_LEN]);

/* Map a reject reason to -LOCUS_E* (unknown reasons: -ECONNREFUSED). */
int locus_verbs_reject_errno(int reason);

/* ------------------------------------------------------------------ */
/* Ring / credit arithmetic (pure). Counters are cumulative u64 slot    */
/* counts; unsigned subtraction keeps them right across u64 wrap too.   */

struct locus_verbs_ring {
	uint32_t slot_count;
	uint32_t slot_shift;
};

/* Slots a message of len bytes occupies (len >= 1). */
static inline uint32_t locus_verbs_slots_for(const struct locus_verbs_ring *r, uint64_t len)
{
	return (uint32_t)((len + (1ull << r->slot_shift) - 1) >> r->slot_shift);
}

/* Largest message the ring takes: slot_count / 2 slots (see top comment). */
static inline uint64_t locus_verbs_max_msg(const struct locus_verbs_ring *r)
{
	return (uint64_t)(r->slot_count / 2) << r->slot_shift;
}

/* Slots the sender may still use: slot_count - (head - released). */
static inline uint64_t locus_verbs_credits(const struct locus_verbs_ring *r, uint64_t head,
					   uint64_t released)
{
	return r->slot_count - (head - released);
}

/*
 * Place a message of n slots at cumulative head: *index receives its slot
 * index and the return value is the slots it consumes (n, or n plus the
 * skipped tail when it would cross the end of the ring).
 */
static inline uint32_t locus_verbs_place(const struct locus_verbs_ring *r, uint64_t head,
					 uint32_t n, uint32_t *index)
{
	uint32_t pos = (uint32_t)(head % r->slot_count);

	if (pos + n > r->slot_count) {
		*index = 0;
		return r->slot_count - pos + n;
	}
	*index = pos;
	return n;
}

static inline uint32_t locus_verbs_imm_encode(uint32_t index, uint32_t n)
{
	return index | ((n - 1) << 16);
}

/*
 * Receiver side: validate an arriving message (imm, byte_len) against the
 * expected cumulative head. On success *index, *n and *consumed (n plus any
 * skipped tail) are set. Returns 0 or -LOCUS_EPROTO (the peer broke the ring
 * contract: the connection must be dropped).
 */
int locus_verbs_ring_accept(const struct locus_verbs_ring *r, uint64_t head, uint32_t imm,
			    uint32_t byte_len, uint32_t *index, uint32_t *n, uint32_t *consumed);

/* ------------------------------------------------------------------ */
/* Device discovery from a sysfs root (pure file reading)              */

#define LOCUS_VERBS_NAME_MAX 64
#define LOCUS_VERBS_PCI_MAX  256

struct locus_verbs_devinfo {
	char name[LOCUS_VERBS_NAME_MAX];  /* "mlx5_0", "rxe0" */
	char pci[LOCUS_VERBS_PCI_MAX];    /* resolved device path below /sys/devices, "" if none */
	int numa_node;                    /* -1 unknown */
	unsigned n_ports;
};

/*
 * List RDMA devices under <sysfs_root>/class/infiniband (sysfs_root "/sys"
 * in production). Fills up to max entries, sorted by name; returns the
 * number found (may exceed max) or -errno.
 */
int locus_verbs_dev_list(const char *sysfs_root, struct locus_verbs_devinfo *out, unsigned max);

/*
 * Choose a device. want: a device name, or "auto". For auto, near_pci (a PCI
 * address such as "0000:3b:00.0", or NULL) picks the device sharing the
 * longest PCI path prefix with it (same switch beats same root complex);
 * ties and the no-PCI case prefer numa_node == near_numa (if >= 0), then the
 * lowest name. Returns the index into devs or -ENODEV (err says why).
 */
int locus_verbs_dev_pick(const struct locus_verbs_devinfo *devs, unsigned n, const char *want,
			 const char *sysfs_root, const char *near_pci, int near_numa,
			 struct locus_error *err);

/*
 * rdma_device = auto with the node's GPUs (devmap.c): for each GPU g (PCI
 * address gpus[g], "dddd:bb:dd.f") the RDMA device nearest it in the PCIe
 * tree under sysfs_root: the deepest common ancestor of the two devices'
 * paths below <root>/devices (the same switch beats the same root complex),
 * then the fewest hops between them; devices that share no ancestor with the
 * GPU (another host bridge, a software device) are equally far. Ties go to a
 * device on the GPU's NUMA node, then to the device the fewest earlier GPUs
 * took (GPUs equally near two NICs spread over them), then to the lowest
 * name. Fills devs (sorted by name, *n_devs of them, at most max) and
 * gpu_dev[g] (an index into devs). Returns 0, or negative with err naming
 * the entry at fault: no device, a GPU missing under <root>/bus/pci/devices,
 * a dangling link or one leading outside <root>/devices or to another
 * device, a malformed GPU address or numa_node, more than max devices.
 */
int locus_verbs_dev_near_gpus(const char *sysfs_root, const char *const *gpus, unsigned n_gpus,
			      struct locus_verbs_devinfo *devs, unsigned max, unsigned *n_devs,
			      unsigned *gpu_dev, struct locus_error *err);

/*
 * Find the RoCE v2 GID holding an IPv4-mapped address (::ffff:a.b.c.d) on
 * port of dev: reads ports/<port>/gids/<i> and gid_attrs/types/<i>. If want
 * is non-NULL only that address matches. Returns the GID index and *addr, or
 * -ENOENT.
 */
int locus_verbs_gid_ipv4(const char *sysfs_root, const char *dev, unsigned port,
			 const struct in_addr *want, struct in_addr *addr);

/* ------------------------------------------------------------------ */
/* Endpoint, peers, messages (libibverbs + librdmacm)                  */

struct locus_verbs_ep;
struct locus_verbs_peer;

enum locus_verbs_peer_state {
	LOCUS_VERBS_DOWN = 0,     /* not connected, no attempt scheduled (passive) */
	LOCUS_VERBS_CONNECTING,   /* rdma_cm in progress */
	LOCUS_VERBS_BACKOFF,      /* waiting to redial */
	LOCUS_VERBS_UP,
};

/*
 * Per-peer statistics. Each thread counts in its own copy (no shared
 * cache line, no atomics); locus_verbs_peer_stats() sums them.
 */
struct locus_verbs_stats {
	uint64_t tx_msgs, tx_bytes;
	uint64_t rx_msgs, rx_bytes;
	uint64_t credit_stalls;       /* post refused for lack of inbox credits */
	uint64_t sq_stalls;           /* post refused for lack of send queue room */
	uint64_t credit_writes;
	uint64_t tx_doorbells;        /* ibv_post_send calls that carried messages */
	uint64_t tx_signaled;         /* messages posted with a completion asked for */
	uint64_t cqes;                /* completions of this peer's work polled */
	uint64_t tx_failed;           /* messages completed with an error */
	uint64_t connects, reconnects, disconnects;
	uint64_t rejects_sent, rejects_received;
	uint64_t proto_errors;
	uint64_t stalls;              /* connections failed: sends stopped completing */
	uint64_t rx_dropped;          /* arrived, dropped with their connection */
	uint64_t cq_errors[32];       /* by enum ibv_wc_status (clamped to 31) */
} __locus_cache_aligned;

struct locus_verbs_ep_stats {
	/* handshakes refused, by enum locus_verbs_auth_reason (both sides, every leg) */
	uint64_t auth_refused[LOCUS_VERBS_AUTH_N];
	uint64_t version_rejects;
	uint64_t peer_rejects;        /* unknown / not passive node id, bad data */
	uint64_t cm_events;
	uint64_t stale_cqes;          /* completions of a torn-down connection (data side) */
	uint64_t port_errors;         /* the device's port went down (async event) */
	uint64_t port_ups;            /* ... and came back */
	uint64_t dev_lost;            /* the device went away (locus_verbs_dev.h: LOST) */
	uint64_t dev_back;            /* ... was reopened and is the data side's again */
	uint64_t dev_reopen_failed;   /* it was listed again but could not be reopened (yet) */
} __locus_cache_aligned;

#define LOCUS_VERBS_HOLD 1 /* on_recv return value: the caller releases later */

/*
 * Every callback runs on the data path's thread (inside locus_verbs_poll, or
 * locus_verbs_service when not threaded), never concurrently with itself.
 */
struct locus_verbs_callbacks {
	/*
	 * A message arrived: data points into the inbox, valid until released.
	 * Return 0 to release it now, or LOCUS_VERBS_HOLD to release it later
	 * with locus_verbs_release() (messages of a peer release in order).
	 */
	int (*on_recv)(void *arg, struct locus_verbs_peer *p, const void *data, uint32_t len);
	/* Every posted message completes here exactly once: status 0 or -errno/-LOCUS_E*. */
	void (*on_send_done)(void *arg, struct locus_verbs_peer *p, uint64_t cookie, int status);
	/*
	 * Peer up / down (down: reason as -errno/-LOCUS_E*). Down is also
	 * called when a connection attempt fails (refused, rejected: the
	 * reason says why), before the next redial: once per attempt, after
	 * every message of the connection completed.
	 */
	void (*on_peer_up)(void *arg, struct locus_verbs_peer *p);
	void (*on_peer_down)(void *arg, struct locus_verbs_peer *p, int reason);
	void *arg;
};

/*
 * The device's life, on the control thread (locus_verbs_service, and
 * locus_verbs_ep_destroy for release). A device that goes away (rdma_cm's
 * device removal: `rdma link delete`, a NIC reset or unplugged; a fatal
 * async event; a verbs call failing with ENODEV / EIO that a query of the
 * device confirms) has every connection closed as a port error would
 * (what was posted fails once, on_peer_down, with -ENODEV), then its verbs
 * objects freed once the data side let go of it, and is looked for by name
 * every dev_probe_ms; when it is listed again it is reopened (context, PD,
 * CQ, the inboxes' MRs, the listener) and the dialling peers redial at once.
 * NULL members are skipped.
 */
struct locus_verbs_dev_callbacks {
	/*
	 * The endpoint's PD is about to be freed: deregister every MR made
	 * with it (locus_verbs_mr_reg / _reg_dmabuf / _alloc). lost: the
	 * device went away (false: the endpoint is being destroyed). No
	 * connection is left and the data side touches nothing of the device.
	 */
	void (*release)(void *arg, struct locus_verbs_ep *ep, bool lost);
	/*
	 * The device is back under its name, with a new PD: register again
	 * what release deregistered. 0, or negative with err saying why
	 * (having undone its own part): the device is closed again and looked
	 * for at the next probe. Before any connection of the new device.
	 */
	int (*restore)(void *arg, struct locus_verbs_ep *ep, struct locus_error *err);
	void *arg;
};

struct locus_verbs_ep_params {
	struct in_addr local_addr;     /* address to bind (selects the device) */
	uint16_t port;                 /* listen port (0: do not listen) */
	const char *dev_name;          /* if set, the bound device must be this one */
	uint32_t cluster_id;
	uint16_t node_id;
	uint8_t secret[LOCUS_VERBS_SECRET_LEN];
	uint16_t proto_version;        /* 0: LOCUS_VERBS_PROTO_VERSION (tests change it) */
	uint32_t slot_shift;           /* inbox slot size, log2 (default 14: 16 KiB) */
	uint32_t slot_count;           /* slots per peer inbox (default 256) */
	uint32_t sq_depth;             /* send WRs per peer, power of two (default 256) */
	uint32_t signal_every;         /* selective signalling period (default 16) */
	uint32_t cq_depth;             /* default: enough for 16 peers */
	uint32_t max_peers;            /* default 16 */
	uint32_t max_inline;           /* wanted inline size (default 256, clamped by device) */
	uint32_t area_len;             /* one-sided area per peer inbox (0: none; rounded
					* up to 64, at most LOCUS_VERBS_AREA_MAX) */
	uint32_t credit_idle_us;       /* announce released slots below the batching
					* threshold after the CQ stayed empty this long
					* (default 50 us) */
	uint32_t backoff_min_ms;       /* reconnect back-off (default 20 ms ... 1000 ms) */
	uint32_t backoff_max_ms;
	uint32_t connect_timeout_ms;   /* address/route resolution bound (default 2000) */
	bool threaded;                 /* control and data path on two threads (see top) */
	uint8_t ack_timeout;           /* RC local ACK timeout, 4.096 us * 2^n (default 14:
					* 67 ms; rdma_cm's own default on RoCE is ~1 s,
					* which makes every lost packet cost a second) */
	uint32_t dev_probe_ms;         /* while the device is gone, look for it this often
					* (default 500 ms; no work while it is there) */
	struct locus_verbs_dev_callbacks dev_cb;
	uint32_t stall_ms;             /* sends outstanding this long with none completing
					* fail the connection (-ETIMEDOUT, counted in
					* stalls): RC gives up by itself after 7 ACK time-
					* outs, this catches a QP that stopped without an
					* error (default: 5000, or twice RC's 7 time-outs
					* when that is longer) */
	struct locus_verbs_callbacks cb;
};

/* Fill defaults for every zero field of p. */
void locus_verbs_ep_params_default(struct locus_verbs_ep_params *p);

/*
 * Create an endpoint: binds local_addr (and listens if port != 0), opens the
 * device it resolves to, allocates the PD and CQ. Returns 0 and *out or a
 * negative code; err explains (device mismatch, bind failure, ...).
 */
int locus_verbs_ep_create(const struct locus_verbs_ep_params *p, struct locus_verbs_ep **out,
			  struct locus_error *err);

/*
 * Tear down every peer (in-flight messages complete with -LOCUS_EPEERDOWN,
 * callbacks on the calling thread), free. No data thread may run any more.
 */
void locus_verbs_ep_destroy(struct locus_verbs_ep *ep);

/*
 * Declare a peer. remote non-NULL: we dial it (and redial with back-off);
 * NULL: we accept its connection on our listener. Allocates its inbox on
 * the device's NUMA node and registers it. Returns 0 and *out or negative.
 */
int locus_verbs_peer_add(struct locus_verbs_ep *ep, uint16_t node_id,
			 const struct sockaddr_in *remote, struct locus_verbs_peer **out,
			 struct locus_error *err);

/*
 * A declared peer's membership (control side), for clusters whose members
 * come and go (dataplane/locus_cluster.h). A peer that is not a member is
 * neither dialled nor accepted, and its connection is closed as a dead
 * peer's (what it had in flight fails once). remote: a dialled peer's new
 * address (NULL keeps it); a member whose address changed is disconnected
 * and dialled again at its new address at once. A peer is a member from
 * locus_verbs_peer_add on.
 */
void locus_verbs_peer_set_member(struct locus_verbs_peer *p, bool member,
				 const struct sockaddr_in *remote);

/*
 * Post up to n messages to p as one work-request list. Messages below the
 * device's inline limit are copied at post time (buf may be reused on
 * return); larger ones must stay untouched in memory registered with the
 * endpoint's PD (lkey) until on_send_done. Returns the number posted (0 when
 * out of credits or send-queue room: poll and retry), or -LOCUS_EPEERDOWN,
 * -LOCUS_ERANGE (empty or too large message).
 */
struct locus_verbs_sge {
	uint64_t addr;
	uint32_t len;
	uint32_t lkey;
};
struct locus_verbs_msg {
	const void *buf;
	uint32_t len;                   /* bytes at buf (the first segment) */
	uint32_t lkey;
	uint64_t cookie;
	/*
	 * Gather: n_sg more segments sent after buf in one WRITE_WITH_IMM (rows
	 * straight from a registered buffer region, header from a pool buffer).
	 * 1 + n_sg must not exceed locus_verbs_ep_max_send_sge(); the segments'
	 * memory follows the rules of buf. NULL / 0: buf alone. (Initialise
	 * messages whole, e.g. with a compound literal: n_sg must not be garbage.)
	 */
	const struct locus_verbs_sge *sg;
	uint32_t n_sg;
};
int locus_verbs_post(struct locus_verbs_peer *p, const struct locus_verbs_msg *msgs, unsigned n);

/*
 * Data path: would the message that stopped p's last post (for lack of
 * credits or send queue room) still find none? True until the peer returned
 * credits or a send completed since. A caller that posts in order (the
 * oldest message first) checks it instead of building its list again on
 * every poll.
 */
bool locus_verbs_post_blocked(const struct locus_verbs_peer *p);

/* Data path: poll the CQ once (burst of up to 32). Returns completions handled or negative. */
int locus_verbs_poll(struct locus_verbs_ep *ep);

/*
 * Sleep until a completion or an rdma_cm event arrives, at most timeout_ms,
 * then poll once (lanes that need not spin, and Soft-RoCE, where a spinning
 * receiver takes CPU from the emulated NIC). Returns completions handled
 * (0 on timeout) or negative. CM events are left for locus_verbs_service().
 */
int locus_verbs_wait(struct locus_verbs_ep *ep, int timeout_ms);

/*
 * Release the oldest n held messages of p (in arrival order). Held messages
 * die with their connection (after a reconnect the peer rewrites the
 * slots): once on_peer_down ran, releasing them returns -LOCUS_ESTATE.
 */
int locus_verbs_release(struct locus_verbs_peer *p, unsigned n);

/*
 * Data path: write len bytes of buf into the area of p's inbox for us, at
 * offset 0, by one RDMA WRITE without immediate (the peer's CPU does
 * nothing; no credits). buf is copied (registered staging): reuse it on
 * return. Returns 1, -EBUSY while the previous area write of p has not
 * completed or the send queue is short (try again later), -LOCUS_EPEERDOWN,
 * -LOCUS_ERANGE (len 0 or over area_len).
 */
int locus_verbs_write_area(struct locus_verbs_peer *p, const void *buf, uint32_t len);

/*
 * Our area for p's writes (area_len bytes, NULL without an area). p
 * rewrites it at any time: copy, then check what you copied.
 */
const volatile void *locus_verbs_peer_area(const struct locus_verbs_peer *p, uint32_t *len);

/* Force pending released credits out now (normally batched by slot_count / 4). */
int locus_verbs_flush_credits(struct locus_verbs_peer *p);

/*
 * Control path: handle rdma_cm events, reconnect timers and the data side's
 * hand-overs (failed connections to flush, quiesced ones to destroy),
 * waiting at most timeout_ms for the first event (0 or negative: do not
 * wait). Not threaded, it also runs the data side's part of the hand-over,
 * so that up / down callbacks come as before. Returns events handled.
 */
int locus_verbs_service(struct locus_verbs_ep *ep, int timeout_ms);

/* Memory: allocate len bytes on the device's NUMA node and register them. */
struct locus_verbs_mr {
	void *addr;
	size_t len;
	size_t alloc_len;  /* page-rounded size we allocated (owned only) */
	uint32_t lkey, rkey;
	unsigned access;   /* the IBV_ACCESS_* flags it was registered with */
	void *ibv_mr;      /* struct ibv_mr *; NULL: not registered (memory still ours if owned) */
	bool numa_alloc;   /* freed with numa_free */
	bool owned;        /* we allocated addr */
};
int locus_verbs_mr_alloc(struct locus_verbs_ep *ep, size_t len, unsigned access,
			 struct locus_verbs_mr *mr, struct locus_error *err);
/*
 * Register caller memory. Every registration here and below is the caller's
 * to release in dev_cb.release (the device's PD goes after it) and to make
 * again in dev_cb.restore; while the device is gone they fail with -ENODEV.
 */
int locus_verbs_mr_reg(struct locus_verbs_ep *ep, void *addr, size_t len, unsigned access,
		       struct locus_verbs_mr *mr, struct locus_error *err);
/*
 * Register a dma-buf (GPU memory). -EOPNOTSUPP with "not supported by this
 * device" when the provider refuses (EOPNOTSUPP / EINVAL / ENOSYS).
 */
int locus_verbs_mr_reg_dmabuf(struct locus_verbs_ep *ep, int fd, uint64_t offset, size_t len,
			      uint64_t iova, unsigned access, struct locus_verbs_mr *mr,
			      struct locus_error *err);
/* Deregister mr (if registered) and free its memory if we allocated it. */
void locus_verbs_mr_free(struct locus_verbs_mr *mr);

/*
 * Export the statistics to a counter directory (locus_counters.h): entries
 * <prefix>_tx_msgs, _tx_bytes, _rx_msgs, _rx_bytes, _credit_stalls,
 * _sq_stalls, _credit_writes, _tx_doorbells, _tx_signaled, _cqes, _tx_failed,
 * _connects, _reconnects, _disconnects, _rejects_received, _proto_errors,
 * _stalls, _rx_dropped,
 * _peer_node, _peer_up (vectors by "peer", the index in declaration order,
 * max_peers long), _cq_errors ("peer" x "status", the ibv_wc_status),
 * _auth_refused (by "reason", enum locus_verbs_auth_reason) and the scalars
 * _version_rejects, _peer_rejects, _cq_bursts, _port_errors, _port_ups,
 * _device_lost, _device_back, _device_reopen_failed. The values land in block
 * data_lcore (what the data path counts, connects and refused hellos too;
 * that thread must own the block) and ctl_lcore (disconnects, rejects, the
 * other refusals, peer_up; the control thread's block; the same block when
 * not threaded): readers sum the blocks. The control part is
 * refreshed by locus_verbs_service(), the data part by
 * locus_verbs_counters_sync_data() on the data thread (plain stores, no
 * syscall: call it every millisecond or so), both by
 * locus_verbs_counters_sync(). Returns 0 or a negative code (err says).
 */
#define LOCUS_VERBS_COUNTER_ENTRIES 32 /* directory entries one endpoint's export takes, at most */
struct locus_counters;
int locus_verbs_counters_attach(struct locus_verbs_ep *ep, struct locus_counters *c,
				uint32_t data_lcore, uint32_t ctl_lcore, const char *prefix,
				struct locus_error *err);
void locus_verbs_counters_sync_data(struct locus_verbs_ep *ep);
void locus_verbs_counters_sync_ctl(struct locus_verbs_ep *ep);
void locus_verbs_counters_sync(struct locus_verbs_ep *ep);

/* Accessors. The state is safe from either thread (UP: the link is up). */
enum locus_verbs_peer_state locus_verbs_peer_state(const struct locus_verbs_peer *p);
uint16_t locus_verbs_peer_node(const struct locus_verbs_peer *p);
/* Both threads' counts summed into a snapshot (not threaded: exact). */
const struct locus_verbs_stats *locus_verbs_peer_stats(struct locus_verbs_peer *p);
/* The endpoint's counts, the same way. */
const struct locus_verbs_ep_stats *locus_verbs_ep_stats(struct locus_verbs_ep *ep);
/* Device limits after creation. */
uint32_t locus_verbs_ep_max_inline(const struct locus_verbs_ep *ep);
/* Scatter/gather entries one message may have (buf + sg), 1..LOCUS_VERBS_MAX_SGE. */
uint32_t locus_verbs_ep_max_send_sge(const struct locus_verbs_ep *ep);
const char *locus_verbs_ep_dev_name(const struct locus_verbs_ep *ep);
/* The device's life (enum locus_verbs_dev_state, locus_verbs_dev.h); either thread. */
unsigned locus_verbs_ep_device_state(const struct locus_verbs_ep *ep);
/*
 * Control: what the device's life last said, for the log: why it was taken
 * for lost ("device removal (rdma_cm)"), or why its reopening failed.
 */
const char *locus_verbs_ep_device_note(const struct locus_verbs_ep *ep);
int locus_verbs_ep_numa_node(const struct locus_verbs_ep *ep);
/* Raw handles for tests that play a misbehaving peer (struct ibv_qp *, ibv_pd *). */
void *locus_verbs_peer_qp(struct locus_verbs_peer *p);
void *locus_verbs_ep_pd(struct locus_verbs_ep *ep);
/*
 * wr_id a raw WR posted on locus_verbs_peer_qp() must carry so that its
 * completion is attributed to p (its error takes p down like any other).
 */
uint64_t locus_verbs_peer_raw_wrid(const struct locus_verbs_peer *p);
/* What the peer told us about its inbox for us (valid while UP). */
void locus_verbs_peer_remote(const struct locus_verbs_peer *p, uint64_t *addr, uint32_t *rkey,
			     uint64_t *len);
/* Our inbox for this peer (tests check nothing outside it changed). */
void *locus_verbs_peer_inbox(const struct locus_verbs_peer *p, uint64_t *len);

#endif /* LOCUS_VERBS_H */
