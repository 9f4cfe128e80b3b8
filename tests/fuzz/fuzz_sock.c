// SPDX-License-Identifier: MIT
/* Descriptors, connections and requests for the socket targets (fuzz_sock.h). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fuzz_sock.h"

int fz_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		abort();
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

int fz_kind_fd(unsigned k)
{
	int fd, sv[2];

	switch (k % 5) {
	case 0:
		fd = memfd_create("fz", MFD_CLOEXEC);
		if (fd >= 0 && ftruncate(fd, 1 << 16) < 0)
			abort();
		return fd;
	case 1:
		return open("/dev/null", O_RDWR | O_CLOEXEC);
	case 2:
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
			abort();
		close(sv[1]);
		return sv[0];
	case 3:
		return memfd_create("fz-small", MFD_CLOEXEC); /* 0 bytes long */
	default:
		return open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
}

int fz_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		abort();
	return fd;
}

ssize_t fz_send(int sock, const void *bytes, size_t len, const int *fds, int nfd)
{
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)bytes, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfd > 8)
		abort();
	if (nfd) {
		struct cmsghdr *cm;

		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfd * sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL);
}
