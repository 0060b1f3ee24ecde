# shellcheck shell=bash
# Network namespaces, veth links and traffic shaping for bench/netem_cluster.sh (sourced).
#
# Topology: a switch namespace holds the bridge `br0` and nothing else (no address, no process).
# Every other namespace gets one veth pair: its inner end is `eth0` (the namespace's only link,
# with its address) and its outer end is a port of br0. So nothing is created in the root
# namespace: the private /24 is routed only inside these namespaces, and deleting the namespaces
# deletes every link and the bridge with them. (The bridge is not put in a process's namespace:
# there it would answer ARP for that namespace's address itself and take its traffic past the
# shaped link.)
#
# Shaping: each direction of each link is shaped once, on the egress of the side that sends:
# the inner `eth0` (namespace -> bridge) and the bridge port (bridge -> namespace). A packet from
# one namespace to another crosses two shaped egresses (the sender's eth0, the receiver's bridge
# port), each with half the one-way delay, so the process-to-process one-way delay is the
# configured delay and the round trip twice it. Each link carries the configured rate in each
# direction (a full-duplex NIC on a switch). With sch_netem: `netem delay D/2 rate R`. Kernels
# without sch_netem (this project's build machines) get `tbf rate R` and no added delay; the
# caller reports that.
#
# Everything it creates is recorded in netem_namespaces; netem_teardown removes it.

netem_namespaces=()  # every namespace created (or about to be), in order; [0] is the switch
netem_shaper=""      # netem | tbf (the caller sets it from netem_probe)

# netem_probe: when namespaces can be created here (root or CAP_NET_ADMIN, a kernel with network
# namespaces, veth and bridge) prints the shaper to use (netem, or tbf where the kernel has no
# sch_netem) and returns 0; otherwise prints why and returns 1.
netem_probe() {
  local probe="dlrm-$$-probe" why="" shaper
  if ! why=$(ip netns add "$probe" 2>&1); then
    echo "cannot create a network namespace (ip netns add: ${why:-failed})"
    return 1
  fi
  if ! why=$(ip -n "$probe" link add probebr0 type bridge 2>&1 &&
    ip -n "$probe" link add probev0 type veth peer name probev1 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot create a bridge or veth pair in a namespace (${why:-failed})"
    return 1
  fi
  if tc -n "$probe" qdisc add dev probev0 root netem delay 1ms rate 1gbit >/dev/null 2>&1; then
    shaper=netem
  elif tc -n "$probe" qdisc add dev probev0 root tbf rate 1gbit burst 128kb latency 100ms \
    >/dev/null 2>&1; then
    shaper=tbf
  else
    ip netns del "$probe" 2>/dev/null
    echo "the kernel has neither the netem nor the tbf qdisc (tc qdisc add ... failed)"
    return 1
  fi
  ip netns del "$probe"
  echo "$shaper"
}

# netem_rate_bits RATE: tc's rate syntax (1gbit, 100mbit, 10Gbit, 500kbit, 125mbps) in bits/s.
netem_rate_bits() {
  local rate="${1,,}" num unit
  num="${rate%%[a-z]*}"
  unit="${rate#"$num"}"
  [[ "$num" =~ ^[0-9]+(\.[0-9]+)?$ ]] || return 1
  local mult
  case "$unit" in
    bit | "") mult=1 ;;
    kbit) mult=1000 ;;
    mbit) mult=1000000 ;;
    gbit) mult=1000000000 ;;
    tbit) mult=1000000000000 ;;
    bps) mult=8 ;;
    kbps) mult=8000 ;;
    mbps) mult=8000000 ;;
    gbps) mult=8000000000 ;;
    *) return 1 ;;
  esac
  awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
}

# netem_delay_us DELAY: 1ms, 100us, 2.5ms, 0 -> microseconds.
netem_delay_us() {
  local d="${1,,}" num unit
  num="${d%%[a-z]*}"
  unit="${d#"$num"}"
  [[ "$num" =~ ^[0-9]+(\.[0-9]+)?$ ]] || return 1
  local mult
  case "$unit" in
    us | usec) mult=1 ;;
    ms | msec) mult=1000 ;;
    s | sec) mult=1000000 ;;
    "") [ "$num" = 0 ] || return 1; mult=1 ;;
    *) return 1 ;;
  esac
  awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
}

# netem_shape NS DEV RATE_BITS HALF_DELAY_US: the root qdisc of one egress.
netem_shape() {
  local ns="$1" dev="$2" bits="$3" half_us="$4"
  if [ "$netem_shaper" = netem ]; then
    # limit: packets queued (the delay line and the rate queue together); 1000 would drop at
    # 10gbit with a few ms of delay.
    tc -n "$ns" qdisc add dev "$dev" root netem delay "${half_us}us" rate "${bits}bit" limit 100000
  else
    # burst: 1 ms at the rate, at least two 64 KiB GSO packets; latency: how long a packet may
    # queue before tbf drops it.
    local burst=$((bits / 8 / 1000))
    [ "$burst" -ge 131072 ] || burst=131072
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "${bits}bit" burst "$burst" latency 100ms
  fi
}

# netem_add_switch NS: the switch namespace with its bridge; call it before netem_add_namespace.
netem_add_switch() {
  netem_namespaces+=("$1")  # recorded first, so that teardown finds it whatever fails next
  ip netns add "$1"
  ip -n "$1" link add br0 type bridge
  ip -n "$1" link set br0 up
}

# netem_add_namespace NS ADDR RATE_BITS HALF_DELAY_US: creates NS, links it to the switch's
# bridge and gives it ADDR/24.
netem_add_namespace() {
  local ns="$1" addr="$2" bits="$3" half_us="$4"
  local switch="${netem_namespaces[0]}" port="v${#netem_namespaces[@]}"
  netem_namespaces+=("$ns")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$switch" link add "$port" type veth peer name eth0 netns "$ns"
  ip -n "$switch" link set "$port" master br0
  ip -n "$switch" link set "$port" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  netem_shape "$ns" eth0 "$bits" "$half_us"
  netem_shape "$switch" "$port" "$bits" "$half_us"
}

# netem_link_bytes NS: "TX RX" of the namespace's eth0: bytes it has sent into the bridge and
# bytes the bridge has delivered to it.
netem_link_bytes() {
  ip netns exec "$1" cat /sys/class/net/eth0/statistics/tx_bytes \
    /sys/class/net/eth0/statistics/rx_bytes | paste -sd' '
}

# netem_qdisc_counters NS: "DROPPED OVERLIMITS" summed over the namespace's qdiscs (packets the
# shapers dropped, and times they held a packet back to keep to the rate).
netem_qdisc_counters() {
  tc -s -n "$1" qdisc show | awk '/dropped/ {
    gsub(/[(),]/, " ")
    for (i = 1; i < NF; i++) {
      if ($i == "dropped") d += $(i + 1)
      if ($i == "overlimits") o += $(i + 1)
    }
  } END { printf "%d %d\n", d, o }'
}

# netem_teardown: kills whatever still runs in the recorded namespaces and deletes them (their
# veth pairs and the bridge go with them). Prints what it could not remove; 0 when all is gone.
netem_teardown() {
  local ns pid left=0
  for ns in "${netem_namespaces[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  for ((i = ${#netem_namespaces[@]} - 1; i >= 0; i--)); do
    ns="${netem_namespaces[$i]}"
    ip netns del "$ns" 2>/dev/null
    if ip netns list 2>/dev/null | grep -q "^$ns\b"; then
      echo "netem: could not delete namespace $ns" >&2
      left=1
    fi
  done
  netem_namespaces=()
  return "$left"
}
