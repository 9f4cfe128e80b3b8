// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "locus_crc32c.h"
#include "locus_err_priv.h"
#include "locus_file.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

#define HDR_SIZE sizeof(struct locus_tbl_hdr)

const char *locus_tbl_kind_name(unsigned kind)
{
	switch (kind) {
	case LOCUS_TBL_ELDR:
		return "eldr";
	case LOCUS_TBL_GRACE:
		return "grace";
	case LOCUS_TBL_GRACE_SET:
		return "graceset";
	default:
		return "unknown";
	}
}

static uint32_t hdr_crc(const struct locus_tbl_hdr *h)
{
	struct locus_tbl_hdr tmp = *h;

	tmp.hdr_crc32c = 0;
	return locus_crc32c(&tmp, sizeof(tmp));
}

int locus_tbl_seal(void *buf, size_t buf_len, unsigned kind, uint32_t kind_version,
		   size_t payload_len)
{
	struct locus_tbl_hdr *h = buf;
	struct timespec ts;

	if (!buf || kind == 0 || kind >= LOCUS_TBL_KIND_MAX)
		return -EINVAL;
	if (payload_len > LOCUS_TBL_MAX_PAYLOAD || buf_len < HDR_SIZE + payload_len)
		return -LOCUS_ERANGE;
	clock_gettime(CLOCK_REALTIME, &ts);
	memset(h, 0, HDR_SIZE);
	h->magic = LOCUS_TBL_MAGIC;
	h->format_version = LOCUS_TBL_FORMAT_VERSION;
	h->kind = (uint16_t)kind;
	h->kind_version = kind_version;
	h->payload_len = payload_len;
	h->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	h->payload_crc32c = locus_crc32c((const uint8_t *)buf + HDR_SIZE, payload_len);
	h->hdr_crc32c = hdr_crc(h);
	return 0;
}

int locus_tbl_set_generation(void *buf, size_t len, uint64_t generation)
{
	struct locus_tbl_hdr *h = buf;

	if (!buf || len < HDR_SIZE)
		return -LOCUS_ERANGE;
	h->generation = generation;
	h->hdr_crc32c = hdr_crc(h);
	return 0;
}

int locus_tbl_check(const void *buf, size_t len, unsigned expect_kind,
		    const void **payload, size_t *payload_len, struct locus_error *err)
{
	struct locus_tbl_hdr h;
	uint32_t crc;

	if (!buf || len < HDR_SIZE)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "table is %zu bytes, shorter than its %zu-byte header",
				       buf ? len : 0, HDR_SIZE);
	memcpy(&h, buf, HDR_SIZE);
	if (h.magic != LOCUS_TBL_MAGIC)
		return locus_error_set(err, LOCUS_EBADMAGIC,
				       "not a locus table (magic 0x%016llx, expected 0x%016llx)",
				       (unsigned long long)h.magic,
				       (unsigned long long)LOCUS_TBL_MAGIC);
	if (h.format_version != LOCUS_TBL_FORMAT_VERSION)
		return locus_error_set(err, LOCUS_EVERSION,
				       "table format version %u, this build reads %u",
				       h.format_version, LOCUS_TBL_FORMAT_VERSION);
	crc = hdr_crc(&h);
	if (crc != h.hdr_crc32c)
		return locus_error_set(err, LOCUS_ECRC,
				       "table header checksum 0x%08x, computed 0x%08x",
				       h.hdr_crc32c, crc);
	if (h.kind == 0 || h.kind >= LOCUS_TBL_KIND_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "unknown table kind %u", h.kind);
	if (expect_kind && h.kind != expect_kind)
		return locus_error_set(err, LOCUS_ERANGE, "table kind is %s, expected %s",
				       locus_tbl_kind_name(h.kind),
				       locus_tbl_kind_name(expect_kind));
	if (h.payload_len > LOCUS_TBL_MAX_PAYLOAD)
		return locus_error_set(err, LOCUS_ERANGE, "table payload length %llu too large",
				       (unsigned long long)h.payload_len);
	if (len - HDR_SIZE < h.payload_len)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "table truncated: payload %zu bytes of %llu",
				       len - HDR_SIZE, (unsigned long long)h.payload_len);
	if (len - HDR_SIZE > h.payload_len)
		return locus_error_set(err, LOCUS_ERANGE,
				       "table has %zu trailing bytes after its payload",
				       len - HDR_SIZE - (size_t)h.payload_len);
	crc = locus_crc32c((const uint8_t *)buf + HDR_SIZE, h.payload_len);
	if (crc != h.payload_crc32c)
		return locus_error_set(err, LOCUS_ECRC,
				       "table payload checksum 0x%08x, computed 0x%08x",
				       h.payload_crc32c, crc);
	if (payload)
		*payload = (const uint8_t *)buf + HDR_SIZE;
	if (payload_len)
		*payload_len = h.payload_len;
	return 0;
}

int locus_tbl_read_file(const char *path, unsigned expect_kind, void **buf, size_t *len,
			struct locus_error *err)
{
	char *data;
	size_t got;
	int ret;

	ret = locus_file_read(path, LOCUS_TBL_MAX_PAYLOAD + HDR_SIZE, &data, &got, err);
	if (ret < 0)
		return ret;
	ret = locus_tbl_check(data, got, expect_kind, NULL, NULL, err);
	if (ret < 0) {
		if (err) {
			char msg[LOCUS_ERRMSG_MAX];

			memcpy(msg, err->msg, sizeof(msg));
			locus_error_set(err, err->code, "%s: %.200s", path, msg);
		}
		free(data);
		return ret;
	}
	*buf = data;
	*len = got;
	return 0;
}

int locus_tbl_write_file(const char *path, const void *buf, size_t len,
			 struct locus_error *err)
{
	char tmp[4096];
	size_t off = 0;
	int fd, ret;

	ret = locus_tbl_check(buf, len, 0, NULL, NULL, err);
	if (ret < 0)
		return ret;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp))
		return locus_error_set(err, ENAMETOOLONG, "%s: path too long", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return locus_error_set(err, errno, "%s: %s", tmp, strerror(errno));
	while (off < len) {
		ssize_t n = write(fd, (const uint8_t *)buf + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = locus_error_set(err, errno, "%s: write: %s", tmp, strerror(errno));
			goto err_unlink;
		}
		off += (size_t)n;
	}
	if (fsync(fd) < 0) {
		ret = locus_error_set(err, errno, "%s: fsync: %s", tmp, strerror(errno));
		goto err_unlink;
	}
	if (close(fd) < 0) {
		fd = -1;
		ret = locus_error_set(err, errno, "%s: close: %s", tmp, strerror(errno));
		goto err_unlink;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		ret = locus_error_set(err, errno, "%s: rename: %s", path, strerror(errno));
		goto err_unlink;
	}
	return 0;

err_unlink:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return ret;
}
