// SPDX-License-Identifier: MIT
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd_util.h"
#include "locus_etcd.h"

int etcd_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	if (!bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/* Run a shell command; 0 when it exited 0. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd) == 0 ? 0 : -1;
}

/* A CA, a server certificate for 127.0.0.1, a client certificate, and a stranger CA. */
static int make_certs(struct etcd_srv *s)
{
	const char *d = s->dir;

	snprintf(s->ca, sizeof(s->ca), "%s/ca.pem", d);
	snprintf(s->cert, sizeof(s->cert), "%s/client.pem", d);
	snprintf(s->key, sizeof(s->key), "%s/client.key", d);
	snprintf(s->other_ca, sizeof(s->other_ca), "%s/other-ca.pem", d);
	return sh("cd %s && exec >certs.log 2>&1 && "
		  "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=locus-test-ca "
		  "-keyout ca.key -out ca.pem && "
		  "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=stranger "
		  "-keyout other-ca.key -out other-ca.pem && "
		  "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key "
		  "-out server.csr && "
		  "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' "
		  "> server.ext && "
		  "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
		  "-days 2 -extfile server.ext -out server.pem && "
		  "openssl req -newkey rsa:2048 -nodes -subj /CN=locusd -keyout client.key "
		  "-out client.csr && "
		  "printf 'extendedKeyUsage=clientAuth\\n' > client.ext && "
		  "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
		  "-days 2 -extfile client.ext -out client.pem", d);
}

static int launch(struct etcd_srv *s)
{
	const char *bin = getenv("LOCUS_ETCD") ? getenv("LOCUS_ETCD") : "/usr/bin/etcd";
	char data[300], log[300], curl[96], purl[96], cluster[128], ca[300], cert[300], key[300];
	pid_t pid;

	snprintf(data, sizeof(data), "%s/data", s->dir);
	snprintf(log, sizeof(log), "%s/etcd.log", s->dir);
	snprintf(curl, sizeof(curl), "%s://127.0.0.1:%d", s->tls ? "https" : "http",
		 s->client_port);
	snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", s->peer_port);
	snprintf(cluster, sizeof(cluster), "default=%s", purl);
	snprintf(ca, sizeof(ca), "--trusted-ca-file=%s/ca.pem", s->dir);
	snprintf(cert, sizeof(cert), "--cert-file=%s/server.pem", s->dir);
	snprintf(key, sizeof(key), "--key-file=%s/server.key", s->dir);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (s->tls)
			execl(bin, bin, "--name", "default", "--data-dir", data,
			      "--listen-client-urls", curl, "--advertise-client-urls", curl,
			      "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
			      "--initial-cluster", cluster, "--client-cert-auth", ca, cert, key,
			      (char *)NULL);
		else
			execl(bin, bin, "--name", "default", "--data-dir", data,
			      "--listen-client-urls", curl, "--advertise-client-urls", curl,
			      "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
			      "--initial-cluster", cluster, (char *)NULL);
		_exit(127);
	}
	s->pid = pid;
	/* answering: a range of one key goes through */
	for (int i = 0; i < 200; i++) {
		struct locus_etcd_params p = { .endpoints = s->url, .timeout_ms = 500,
					       .cacert = s->tls ? s->ca : NULL,
					       .cert = s->tls ? s->cert : NULL,
					       .key = s->tls ? s->key : NULL };
		struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = "/" };
		struct locus_etcd_resp r;
		struct locus_etcd *e;
		int ok;

		if (waitpid(pid, NULL, WNOHANG) == pid) {
			s->pid = 0;
			fprintf(stderr, "etcd_util: %s exited at start (log: %s)\n", bin, log);
			return -1;
		}
		if (locus_etcd_open(&p, &e, NULL) < 0)
			return -1;
		ok = locus_etcd_call_op(e, &op, &r) == 0;
		locus_etcd_resp_free(&r);
		locus_etcd_close(e);
		if (ok)
			return 0;
		usleep(50000);
	}
	fprintf(stderr, "etcd_util: etcd on %s did not answer in 10 s (log: %s)\n", s->url, log);
	etcd_srv_kill(s);
	return -1;
}

int etcd_srv_start(struct etcd_srv *s, bool tls)
{
	memset(s, 0, sizeof(*s));
	s->tls = tls;
	snprintf(s->dir, sizeof(s->dir), "/tmp/locus-etcd-XXXXXX");
	if (!mkdtemp(s->dir))
		return -1;
	if (tls && make_certs(s) < 0) {
		fprintf(stderr, "etcd_util: openssl could not make the certificates (%s/certs.log)\n",
			s->dir);
		return -1;
	}
	s->client_port = etcd_free_port();
	s->peer_port = etcd_free_port();
	if (s->client_port < 0 || s->peer_port < 0 || s->client_port == s->peer_port)
		return -1;
	snprintf(s->url, sizeof(s->url), "%s://127.0.0.1:%d", tls ? "https" : "http",
		 s->client_port);
	return launch(s);
}

int etcd_srv_restart(struct etcd_srv *s)
{
	return s->pid ? 0 : launch(s);
}

static void signal_wait(struct etcd_srv *s, int sig)
{
	if (s->pid <= 0)
		return;
	kill(s->pid, sig);
	waitpid(s->pid, NULL, 0);
	s->pid = 0;
}

void etcd_srv_stop(struct etcd_srv *s)
{
	signal_wait(s, SIGTERM);
}

void etcd_srv_kill(struct etcd_srv *s)
{
	signal_wait(s, SIGKILL);
}

void etcd_srv_destroy(struct etcd_srv *s)
{
	etcd_srv_kill(s);
	if (s->dir[0] && !strncmp(s->dir, "/tmp/locus-etcd-", 16))
		sh("rm -rf '%s'", s->dir);
	s->dir[0] = 0;
}
