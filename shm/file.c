// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "locus_err_priv.h"
#include "locus_file.h"

int locus_file_read(const char *path, uint64_t max, char **buf, size_t *len,
		    struct locus_error *err)
{
	struct stat st;
	size_t got = 0;
	char *data;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return locus_error_set(err, errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		ret = locus_error_set(err, EINVAL, "%s: not a readable regular file", path);
		goto err_close;
	}
	if ((uint64_t)st.st_size > max) {
		ret = locus_error_set(err, LOCUS_ERANGE, "%s: %lld bytes exceeds the limit of %llu",
				      path, (long long)st.st_size, (unsigned long long)max);
		goto err_close;
	}
	data = malloc((size_t)st.st_size + 1);
	if (!data) {
		ret = locus_error_set(err, ENOMEM, "%s: out of memory", path);
		goto err_close;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, data + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = locus_error_set(err, errno, "%s: read: %s", path, strerror(errno));
			free(data);
			goto err_close;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	data[got] = '\0';
	close(fd);
	*buf = data;
	*len = got;
	return 0;

err_close:
	close(fd);
	return ret;
}
