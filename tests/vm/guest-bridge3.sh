# Sourced INSIDE the qemu guest by guest-cluster.sh: three rxe devices as three
# "nodes" on one bridge,
#   rxea on va (192.0.2.30), rxeb on vb (192.0.2.31), rxec on vc (192.0.2.32)
# each va/vb/vc the end of a veth pair whose other end is in br0, all in the
# initial namespace (rxe on 6.1 answers RoCE only there). Policy routing makes
# traffic between two local addresses leave by the source's own interface and
# cross the bridge instead of the loopback shortcut; arp_ignore = 1 lets only
# the interface that owns an address answer for it. Exits the guest script on
# failure.
br_fail() { echo "GUEST SETUP FAILED: $*"; exit 1; }
BR3_IF=(va vb vc)
BR3_IP=(192.0.2.30 192.0.2.31 192.0.2.32)
ip link add br0 type bridge || br_fail "bridge"
ip link set br0 up
for k in all default; do
	sysctl -qw net.ipv4.conf.$k.accept_local=1 net.ipv4.conf.$k.rp_filter=0 \
		net.ipv4.conf.$k.arp_ignore=1 net.ipv4.conf.$k.arp_announce=2
done
for i in 0 1 2; do
	v=${BR3_IF[$i]}
	ip link add "$v" type veth peer name "${v}br" || br_fail "veth $v"
	ip link set "${v}br" master br0
	ip link set "${v}br" up
	sysctl -qw net.ipv4.conf.$v.accept_local=1 net.ipv4.conf.$v.rp_filter=0 \
		net.ipv4.conf.$v.arp_ignore=1 net.ipv4.conf.$v.arp_announce=2
	ip addr add "${BR3_IP[$i]}/24" dev "$v"
	ip link set "$v" up
done
br3_routes() {
	local i j
	for i in 0 1 2; do
		for j in 0 1 2; do
			[ $i = $j ] && continue
			ip route replace "${BR3_IP[$j]}/32" dev "${BR3_IF[$i]}" table $((130 + i))
		done
	done
}
br3_routes
for i in 0 1 2; do
	v=${BR3_IF[$i]}
	ip rule add oif "$v" lookup $((130 + i)) pref $((100 + i))
	ip rule add from "${BR3_IP[$i]}" lookup $((130 + i)) pref $((110 + i))
	ip rule add iif "$v" lookup local pref $((10 + i))
done
ip rule add pref 1000 lookup local; ip rule del pref 0
for i in 0 1 2; do
	rdma link add "rxe${BR3_IF[$i]#v}" type rxe netdev "${BR3_IF[$i]}" ||
		br_fail "rxe on ${BR3_IF[$i]}"
done
