// SPDX-License-Identifier: MIT
/*
 * Ask a DPDK process's telemetry socket one command, as dpdk-telemetry.py
 * does, and print the JSON reply:
 *   telemetry_query FILE_PREFIX COMMAND      e.g. locus-default /locus/info
 * The socket is /var/run/dpdk/<prefix>/dpdk_telemetry.v2 (SOCK_SEQPACKET);
 * the process first sends a greeting, then one reply per command.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int recv_one(int fd, char *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, 5000) != 1)
		return -1;
	n = recv(fd, buf, len - 1, 0);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char buf[16384];
	int fd;

	if (argc != 3)
		return 2;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/var/run/dpdk/%s/dpdk_telemetry.v2", argv[1]);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror(sa.sun_path);
		return 1;
	}
	if (recv_one(fd, buf, sizeof(buf)) < 0 || send(fd, argv[2], strlen(argv[2]), 0) < 0 ||
	    recv_one(fd, buf, sizeof(buf)) < 0) {
		fprintf(stderr, "telemetry_query: no answer\n");
		return 1;
	}
	printf("%s\n", buf);
	close(fd);
	return 0;
}
