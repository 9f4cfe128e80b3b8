# Sourced INSIDE the qemu guest by guest-verbs.sh (after guest-veth.sh, with
# T and rc set): the handshake under a capture. tcpdump records the RoCEv2
# traffic of the veth pair (UDP 4791 on vx: both directions between rxex and
# rxey) while $RXE_VT_AUTH connects two endpoints across it and replays what
# they put on the wire (it reads the capture as it grows: tcpdump -U); then
# `$RXE_VT_AUTH --scan` reads the whole file: the cluster secret must not be
# in it (its bytes, its hex), the rdma_cm exchange must. The capture is kept
# in the guest's working folder (the host's $RXE_VM_DIR/rw) as auth-exchange.pcap.
AUTH_DIR=$(mktemp -d /tmp/auth.XXXXXX)
AUTH_PCAP=$AUTH_DIR/exchange.pcap
# -Z root: Debian's tcpdump drops to user tcpdump, who cannot write here
tcpdump -Z root -i vx -U -n -w "$AUTH_PCAP" udp port 4791 2> "$AUTH_DIR/tcpdump.log" &
AUTH_TD=$!
for _ in $(seq 100); do
	grep -q "listening on" "$AUTH_DIR/tcpdump.log" 2>/dev/null && break
	sleep 0.1
done
if ! grep -q "listening on" "$AUTH_DIR/tcpdump.log"; then
	sed 's/^/  [tcpdump] /' "$AUTH_DIR/tcpdump.log"
	echo "FAIL: tcpdump did not start"; rc=1
else
	VT_CAPTURE=$AUTH_PCAP timeout "$T" "$RXE_VT_AUTH" || rc=1
	sleep 0.3
	kill -INT $AUTH_TD; wait $AUTH_TD
	sed 's/^/  [tcpdump] /' "$AUTH_DIR/tcpdump.log" | tail -n 3
	"$RXE_VT_AUTH" --scan "$AUTH_PCAP" || rc=1
	cp "$AUTH_PCAP" ./auth-exchange.pcap 2>/dev/null || true
fi
kill $AUTH_TD 2>/dev/null
