// SPDX-License-Identifier: MIT
/* locusd's cluster secret file (locusd_net.h): 64 hex characters, not readable by others. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "locus_err_priv.h"
#include "locusd_net.h"


static int hexval(int c)
{
	return isdigit(c) ? c - '0' : (isxdigit(c) ? tolower(c) - 'a' + 10 : -1);
}

int locusd_read_secret(const char *path, uint8_t secret[32], struct locus_error *err)
{
	char buf[130];
	struct stat st;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return locus_error_set(err, errno, "secret_file %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return locus_error_set(err, EINVAL, "secret_file %s: not a regular file", path);
	}
	if (st.st_mode & 0007) {
		close(fd);
		return locus_error_set(err, EACCES,
				       "secret_file %s: readable by others (mode %o): refused", path,
				       (unsigned)(st.st_mode & 0777));
	}
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return locus_error_set(err, errno, "secret_file %s: %s", path, strerror(errno));
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (n == 64) {
		for (int i = 0; i < 32; i++) {
			int hi = hexval((unsigned char)buf[2 * i]), lo = hexval((unsigned char)buf[2 * i + 1]);

			if (hi < 0 || lo < 0)
				return locus_error_set(err, LOCUS_EPARSE,
						       "secret_file %s: not 64 hex characters", path);
			secret[i] = (uint8_t)(hi << 4 | lo);
		}
		return 0;
	}
	return locus_error_set(err, LOCUS_EPARSE,
			       "secret_file %s: %zd bytes; want 64 hex characters (32 bytes)", path, n);
}
