// SPDX-License-Identifier: MIT
/*
 * locus-stat --telemetry: one command on a locusd's DPDK telemetry socket.
 *
 * Debian 12's dpdk packages do not ship dpdk-telemetry.py, so this is the
 * query that works on a fresh machine. The protocol (DPDK's telemetry v2):
 * a SOCK_SEQPACKET socket "dpdk_telemetry.v2" in the EAL runtime directory;
 * on connect the server sends one JSON object with its max_output_len; each
 * command is one message, each reply one JSON object of at most that size.
 * The runtime directory is EAL's: /var/run/dpdk/PREFIX for root, else
 * $XDG_RUNTIME_DIR/dpdk/PREFIX, else /tmp/dpdk/PREFIX; locusd's prefix is
 * "locus-INSTANCE".
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "locus_stat.h"

#define TEL_SOCKET "dpdk_telemetry.v2"
#define TEL_MAX_REPLY (1u << 20) /* more than any max_output_len DPDK announces */
#define TEL_TIMEOUT_MS 2000

/* The socket path EAL uses for instance; -ENAMETOOLONG when it cannot fit. */
static int tel_path(char *buf, size_t len, const char *instance)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	if (getuid() == 0 || !xdg || !xdg[0])
		n = snprintf(buf, len, "%s/dpdk/locus-%s/" TEL_SOCKET,
			     getuid() == 0 ? "/var/run" : "/tmp", instance);
	else
		n = snprintf(buf, len, "%s/dpdk/locus-%s/" TEL_SOCKET, xdg, instance);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* One message within the timeout into buf (NUL-terminated); its length or -errno. */
static ssize_t tel_recv(int fd, char *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;
	int rc;

	do
		rc = poll(&p, 1, TEL_TIMEOUT_MS);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		return -errno;
	if (rc == 0)
		return -ETIMEDOUT;
	n = recv(fd, buf, len - 1, 0);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	buf[n] = '\0';
	return n;
}

/* An object's outer braces, nothing else around them: what every reply is. */
static int json_object_shaped(const char *s, size_t n)
{
	while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
		n--;
	return n >= 2 && s[0] == '{' && s[n - 1] == '}';
}

int locus_stat_telemetry(const char *instance, const char *command, FILE *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char *buf = NULL;
	ssize_t n;
	int fd, rc;

	if (command[0] != '/' || strlen(command) > 256 || strpbrk(command, "\n\r")) {
		fprintf(stderr, "locus-stat: --telemetry \"%s\": want a command such as /locus/info "
			"(starts with '/', one line, at most 256 bytes)\n", command);
		return LOCUS_STAT_EXIT_USAGE;
	}
	if (tel_path(sa.sun_path, sizeof(sa.sun_path), instance) < 0) {
		fprintf(stderr, "locus-stat: instance \"%s\": telemetry socket path too long\n",
			instance);
		return LOCUS_STAT_EXIT_USAGE;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fprintf(stderr, "locus-stat: socket: %s\n", strerror(errno));
		return LOCUS_STAT_EXIT_USAGE;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = errno;
		fprintf(stderr, "locus-stat: %s: %s (is locusd instance \"%s\" running, with "
			"telemetry on?)\n", sa.sun_path, strerror(rc), instance);
		rc = rc == EACCES || rc == EPERM ? LOCUS_STAT_EXIT_PERM : LOCUS_STAT_EXIT_NOINSTANCE;
		goto err_close;
	}
	buf = malloc(TEL_MAX_REPLY);
	if (!buf) {
		fprintf(stderr, "locus-stat: out of memory\n");
		rc = LOCUS_STAT_EXIT_USAGE;
		goto err_close;
	}
	n = tel_recv(fd, buf, TEL_MAX_REPLY); /* the greeting */
	if (n < 0 || !json_object_shaped(buf, (size_t)n) || !strstr(buf, "\"max_output_len\"")) {
		fprintf(stderr, "locus-stat: %s: %s\n", sa.sun_path,
			n < 0 ? strerror((int)-n) : "not a DPDK telemetry v2 greeting");
		rc = LOCUS_STAT_EXIT_CORRUPT;
		goto err_free;
	}
	if (send(fd, command, strlen(command), MSG_NOSIGNAL) < 0) {
		fprintf(stderr, "locus-stat: %s: send: %s\n", sa.sun_path, strerror(errno));
		rc = LOCUS_STAT_EXIT_CORRUPT;
		goto err_free;
	}
	n = tel_recv(fd, buf, TEL_MAX_REPLY);
	if (n < 0 || !json_object_shaped(buf, (size_t)n)) {
		fprintf(stderr, "locus-stat: %s: %s\n", sa.sun_path,
			n < 0 ? strerror((int)-n) : "the reply is not a JSON object");
		rc = LOCUS_STAT_EXIT_CORRUPT;
		goto err_free;
	}
	/* DPDK answers an unknown command with {"COMMAND": null}; say so */
	{
		char unknown[300];

		snprintf(unknown, sizeof(unknown), "{\"%s\":null}", command);
		if (!strcmp(buf, unknown)) {
			fprintf(stderr, "locus-stat: instance \"%s\": no telemetry command %s "
				"(/ lists them)\n", instance, command);
			rc = LOCUS_STAT_EXIT_USAGE;
			goto err_free;
		}
	}
	fprintf(out, "%s\n", buf);
	fflush(out);
	rc = ferror(out) ? LOCUS_STAT_EXIT_USAGE : LOCUS_STAT_EXIT_OK;
err_free:
	free(buf);
err_close:
	close(fd);
	return rc;
}
