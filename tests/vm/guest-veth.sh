# Sourced INSIDE the qemu guest by guest-verbs.sh and guest-locusd.sh: two
# rxe devices as two "nodes" on a veth pair,
#   rxex on vx (192.0.2.20)  <-->  rxey on vy (192.0.2.21)
# in the initial namespace (rxe on 6.1 answers RoCE only there), with policy
# routing so that traffic between the two local addresses really crosses the
# pair instead of the loopback shortcut. Exits the guest script on failure.
veth_fail() { echo "GUEST SETUP FAILED: $*"; exit 1; }
ip link add vx type veth peer name vy || veth_fail "veth"
ip addr add 192.0.2.20/24 dev vx; ip addr add 192.0.2.21/24 dev vy
ip link set vx up; ip link set vy up
for k in all.accept_local vx.accept_local vy.accept_local; do sysctl -qw net.ipv4.conf.$k=1; done
for k in all.rp_filter default.rp_filter vx.rp_filter vy.rp_filter; do sysctl -qw net.ipv4.conf.$k=0; done
# (a link set down loses its routes: guest-faults.sh puts them back after a flap)
veth_routes() {
	ip route replace 192.0.2.21/32 dev vx table 120; ip route replace 192.0.2.20/32 dev vy table 121
}
veth_routes
ip rule add oif vx lookup 120 pref 100; ip rule add oif vy lookup 121 pref 101
ip rule add from 192.0.2.20 to 192.0.2.21 lookup 120 pref 102
ip rule add from 192.0.2.21 to 192.0.2.20 lookup 121 pref 103
ip rule add iif vx lookup local pref 10; ip rule add iif vy lookup local pref 11
ip rule add pref 1000 lookup local; ip rule del pref 0
rdma link add rxex type rxe netdev vx || veth_fail "rxex"
rdma link add rxey type rxe netdev vy || veth_fail "rxey"
