# Sourced by the shell tests (bash): helpers each of them would write again.

# wait_running INSTANCE PID LOG [COUNT [SECONDS]]: until LOG says "instance INSTANCE
# running" COUNT times (default 1: a restart appending to the same log waits for the
# next one), at most SECONDS (default 10). 0; or 1, with the log printed on stderr,
# when PID exits first or the time runs out.
wait_running() {
	local inst=$1 pid=$2 log=$3 count=${4:-1} secs=${5:-10} i n

	for ((i = 0; i < secs * 20; i++)); do
		n=$(grep -c "instance $inst running" "$log" 2>/dev/null)
		[ "${n:-0}" -ge "$count" ] && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			{ echo "locusd ($inst) exited before running:"; cat "$log"; } >&2
			return 1
		fi
		sleep 0.05
	done
	{ echo "locusd ($inst) not running within $secs s:"; cat "$log"; } >&2
	return 1
}

# free_port: a loopback TCP port nothing listens on now.
free_port() {
	/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# etcd_start DIR [tls]: a real etcd (Debian's etcd-server) with its data in DIR, on
# free loopback ports; sets ETCD_URL and ETCD_PID, with tls also ETCD_CA,
# ETCD_CERT, ETCD_KEY (a client certificate: the server asks for one). Waits until
# it answers (10 s). etcd_restart DIR starts it again on the same data and port;
# etcd_stop kills it.
etcd_start() {
	local dir=$1 tls=${2:-}
	mkdir -p "$dir"
	ETCD_CPORT=$(free_port)
	ETCD_PPORT=$(free_port)
	ETCD_TLS=$tls
	if [ -n "$tls" ]; then
		(
			cd "$dir"
			openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca \
				-keyout ca.key -out ca.pem
			openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key \
				-out server.csr
			printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' \
				> server.ext
			openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
				-days 2 -extfile server.ext -out server.pem
			openssl req -newkey rsa:2048 -nodes -subj /CN=locusd -keyout client.key \
				-out client.csr
			printf 'extendedKeyUsage=clientAuth\n' > client.ext
			openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
				-days 2 -extfile client.ext -out client.pem
		) > "$dir/certs.log" 2>&1 || { cat "$dir/certs.log" >&2; return 1; }
		ETCD_URL=https://127.0.0.1:$ETCD_CPORT
		ETCD_CA=$dir/ca.pem ETCD_CERT=$dir/client.pem ETCD_KEY=$dir/client.key
	else
		ETCD_URL=http://127.0.0.1:$ETCD_CPORT
	fi
	etcd_restart "$dir"
}

etcd_restart() {
	local dir=$1 tlsargs=() i
	[ -n "$ETCD_TLS" ] && tlsargs=(--client-cert-auth --trusted-ca-file "$dir/ca.pem"
		--cert-file "$dir/server.pem" --key-file "$dir/server.key")
	etcd --name default --data-dir "$dir/data" \
		--listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PPORT" \
		--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PPORT" \
		--initial-cluster "default=http://127.0.0.1:$ETCD_PPORT" \
		"${tlsargs[@]}" >> "$dir/etcd.log" 2>&1 &
	ETCD_PID=$!
	for ((i = 0; i < 200; i++)); do
		etcdctl_t endpoint health > /dev/null 2>&1 && return 0
		kill -0 "$ETCD_PID" 2>/dev/null || break
		sleep 0.05
	done
	{ echo "etcd did not answer on $ETCD_URL:"; tail -n 20 "$dir/etcd.log"; } >&2
	return 1
}

etcd_stop() {
	kill -9 "$ETCD_PID" 2>/dev/null || true
	wait "$ETCD_PID" 2>/dev/null || true
}

# etcdctl_t ARGS...: etcdctl against the etcd etcd_start started.
etcdctl_t() {
	local tlsargs=()
	[ -n "${ETCD_TLS:-}" ] && tlsargs=(--cacert "$ETCD_CA" --cert "$ETCD_CERT" --key "$ETCD_KEY")
	ETCDCTL_API=3 etcdctl --endpoints "$ETCD_URL" "${tlsargs[@]}" "$@"
}
