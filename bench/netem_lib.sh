# shellcheck shell=bash
# Network namespaces, links and traffic shaping for bench/netem_cluster.sh (sourced).
#
# Three shapers, the best one the kernel allows unless the caller picks one (netem_probe):
#
# netem and tbf (kernel links). A switch namespace holds the bridge `br0` and nothing else (no
# address, no process). Every other namespace gets one veth pair: its inner end is `eth0` (the
# namespace's only link, with its address) and its outer end is a port of br0. So nothing is
# created in the root namespace: the private /24 is routed only inside these namespaces, and
# deleting the namespaces deletes every link and the bridge with them. (The bridge is not put in a
# process's namespace: there it would answer ARP for that namespace's address itself and take its
# traffic past the shaped link.) Each direction of each link is shaped once, on the egress of the
# side that sends: the inner `eth0` (namespace -> bridge) and the bridge port (bridge ->
# namespace). A packet from one namespace to another crosses two shaped egresses (the sender's
# eth0, the receiver's bridge port), each with half the one-way delay, so the process-to-process
# one-way delay is the configured delay and the round trip twice it. Each link carries the
# configured rate in each direction (a full-duplex NIC on a switch). netem: `netem delay D/2 rate
# R`. tbf (kernels without sch_netem, where nothing better works): `tbf rate R` and no added
# delay; the caller reports that.
#
# userspace (kernels without sch_netem, with TUN devices and bench/delay_switch built): no veth
# and no bridge. The switch namespace holds one process, delay_switch, which creates a TUN device
# `eth0` in every other namespace (its only link, given its address and MTU netem_tun_mtu here)
# and forwards IPv4 packets between them with the same link model: the sender's uplink serialises
# at the rate, the packet takes the one-way delay, the receiver's downlink serialises at the rate
# (drop-tail beyond 100 ms of queue, as tbf's latency below). A TUN device carries IP packets
# without an Ethernet header, so its tx_bytes/rx_bytes count 14 bytes less per packet than a veth
# would. IPv6 is off on these devices (the switch forwards IPv4 only). The switch runs until
# netem_teardown; its counters (netem_switch_counters) are the shaper's drops.
#
# Everything it creates is recorded in netem_namespaces; netem_teardown removes it (and stops the
# switch, which takes its TUN devices with it).

netem_namespaces=()  # every namespace created (or about to be), in order; [0] is the switch
netem_addrs=()       # the address of each of netem_namespaces ("" for the switch)
netem_shaper=""      # netem | userspace | tbf (the caller sets it from netem_probe)
netem_switch_pid=""  # userspace: the delay_switch process
netem_switch_out=""  # userspace: the file its stdout goes to (`ready`, then its counters)
# userspace: MTU of the TUN devices. Near the IPv4 maximum, so that TCP sends segments of up to
# 64 KB (as GSO does on a veth) and the switch handles few packets per byte.
netem_tun_mtu=65000

# netem_probe [SWITCH_BIN [SHAPER]]: when network namespaces can be created here (root or
# CAP_NET_ADMIN) prints the shaper to use and returns 0: SHAPER when given and it works here,
# else the best that works: netem (the kernel has sch_netem, veth and bridge), userspace (TUN
# devices work and SWITCH_BIN, bench/delay_switch's binary, is there), tbf (veth, bridge and the
# tbf qdisc). Otherwise prints why and returns 1.
netem_probe() {
  local switch_bin="${1:-}" wanted="${2:-}" probe="dlrm-$$-probe" why=""
  local no_netem="" no_userspace="" no_tbf=""
  if ! why=$(ip netns add "$probe" 2>&1); then
    echo "cannot create a network namespace (ip netns add: ${why:-failed})"
    return 1
  fi
  if ! why=$(ip -n "$probe" link add probebr0 type bridge 2>&1 &&
    ip -n "$probe" link add probev0 type veth peer name probev1 2>&1); then
    no_netem="cannot create a bridge or veth pair in a namespace (${why:-failed})"
    no_tbf="$no_netem"
  else
    tc -n "$probe" qdisc add dev probev0 root netem delay 1ms rate 1gbit >/dev/null 2>&1 ||
      no_netem="the kernel has no sch_netem (tc qdisc add ... netem failed)"
    tc -n "$probe" qdisc add dev probev1 root tbf rate 1gbit burst 128kb latency 100ms \
      >/dev/null 2>&1 || no_tbf="the kernel has no tbf qdisc (tc qdisc add ... tbf failed)"
  fi
  if [ -z "$switch_bin" ] || [ ! -x "$switch_bin" ]; then
    no_userspace="no delay_switch binary (${switch_bin:-none given}; make it with"
    no_userspace+=" cmake --build build --target delay_switch)"
  elif ! why=$(ip -n "$probe" tuntap add dev probetun0 mode tun 2>&1); then
    no_userspace="cannot create a TUN device (ip tuntap add: ${why:-failed})"
  fi
  ip netns del "$probe"
  local shaper reason
  for shaper in ${wanted:-netem userspace tbf}; do
    case "$shaper" in
      netem) reason="$no_netem" ;;
      userspace) reason="$no_userspace" ;;
      tbf) reason="$no_tbf" ;;
      *) reason="unknown shaper (netem, userspace or tbf)" ;;
    esac
    [ -n "$reason" ] || { echo "$shaper"; return 0; }
  done
  if [ -n "$wanted" ]; then
    echo "$reason"
  else
    echo "no shaper works here (netem: $no_netem; userspace: $no_userspace; tbf: $no_tbf)"
  fi
  return 1
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

# netem_add_switch NS: the switch namespace (with its bridge, but for userspace); call it before
# netem_add_namespace.
netem_add_switch() {
  netem_namespaces+=("$1")  # recorded first, so that teardown finds it whatever fails next
  netem_addrs+=("")
  ip netns add "$1"
  [ "$netem_shaper" != userspace ] || return 0
  ip -n "$1" link add br0 type bridge
  ip -n "$1" link set br0 up
}

# netem_add_namespace NS ADDR RATE_BITS HALF_DELAY_US: creates NS; but for userspace (where
# netem_start_switch makes its link) links it to the switch's bridge and gives it ADDR/24.
netem_add_namespace() {
  local ns="$1" addr="$2" bits="$3" half_us="$4"
  local switch="${netem_namespaces[0]}" port="v${#netem_namespaces[@]}"
  netem_namespaces+=("$ns")
  netem_addrs+=("$addr")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  [ "$netem_shaper" != userspace ] || return 0
  ip -n "$switch" link add "$port" type veth peer name eth0 netns "$ns"
  ip -n "$switch" link set "$port" master br0
  ip -n "$switch" link set "$port" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  netem_shape "$ns" eth0 "$bits" "$half_us"
  netem_shape "$switch" "$port" "$bits" "$half_us"
}

# netem_start_switch SWITCH_BIN RATE_BITS DELAY_US LOG: userspace only (elsewhere it does
# nothing), once every namespace exists: starts SWITCH_BIN in the switch namespace with a link
# to each other namespace (stdout to LOG.out, stderr to LOG.err), waits for its `ready`, then gives
# each namespace's eth0 its address and MTU and brings it up. Returns 1, saying why, on failure.
netem_start_switch() {
  local bin="$1" bits="$2" delay_us="$3" log="$4" links=() i ns
  [ "$netem_shaper" = userspace ] || return 0
  for ((i = 1; i < ${#netem_namespaces[@]}; i++)); do
    links+=(--link "${netem_namespaces[$i]}=${netem_addrs[$i]}")
  done
  netem_switch_out="$log.out"
  ip netns exec "${netem_namespaces[0]}" "$bin" "${links[@]}" --rate "${bits}bit" \
    --delay "${delay_us}us" --queue 100ms >"$netem_switch_out" 2>"$log.err" &
  netem_switch_pid=$!
  for ((i = 0; i < 200; i++)); do
    ! grep -qx ready "$netem_switch_out" || break
    if ! kill -0 "$netem_switch_pid" 2>/dev/null; then
      echo "netem: delay_switch exited at start-up: $(cat "$log.err")" >&2
      return 1
    fi
    sleep 0.05
  done
  if ! grep -qx ready "$netem_switch_out"; then
    echo "netem: delay_switch was not ready within 10 s: $(cat "$log.err")" >&2
    return 1
  fi
  for ((i = 1; i < ${#netem_namespaces[@]}; i++)); do
    ns="${netem_namespaces[$i]}"
    # No IPv6 (router solicitations, MLD reports): the switch would drop it as not IPv4. (The
    # namespace's own /proc/sys/net, as `ip netns exec` sees it; no need for procps' sysctl.)
    if [ -e /proc/sys/net/ipv6 ]; then
      ip netns exec "$ns" sh -c 'echo 1 >/proc/sys/net/ipv6/conf/eth0/disable_ipv6' || return 1
    fi
    ip -n "$ns" addr add "${netem_addrs[$i]}/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up mtu "$netem_tun_mtu" || return 1
  done
}

# netem_switch_counters: userspace: "DROPS QUEUED", the packets the switch has dropped so far
# (every reason) and those that waited for a busy link (SIGUSR1 makes it print its counters).
# Returns 1, saying so, when the switch is not running.
netem_switch_counters() {
  local lines i
  lines=$(wc -l <"$netem_switch_out")
  if ! kill -USR1 "$netem_switch_pid" 2>/dev/null; then
    echo "netem: delay_switch is not running" >&2
    return 1
  fi
  for ((i = 0; i < 200; i++)); do
    [ "$(wc -l <"$netem_switch_out")" -le "$lines" ] || break
    sleep 0.01
  done
  tail -n 1 "$netem_switch_out" | python3 -c '
import json, sys
c = json.load(sys.stdin)
print(c["dropped_packets"], c["queued_packets"])'
}

# netem_switch_running: 0 unless the userspace switch was started and has exited.
netem_switch_running() {
  [ -z "$netem_switch_pid" ] || kill -0 "$netem_switch_pid" 2>/dev/null
}

# netem_stop_switch: userspace: stops the switch (SIGTERM, which makes it print its counters to
# netem_switch_out; SIGKILL after 5 s). Nothing when it is not running.
netem_stop_switch() {
  local pid="$netem_switch_pid" i
  [ -n "$pid" ] || return 0
  netem_switch_pid=""
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

# netem_link_bytes NS: "TX RX" of the namespace's eth0: bytes it has sent into the bridge (or
# the userspace switch) and bytes delivered to it from there.
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

# netem_teardown: stops the userspace switch (its TUN devices go with it), kills whatever still
# runs in the recorded namespaces and deletes them (their veth pairs and the bridge go with
# them). Prints what it could not remove, then the switch's last counters; 0 when all is gone.
netem_teardown() {
  local ns pid left=0 switch_out="$netem_switch_out"
  netem_stop_switch
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
  netem_namespaces=() netem_addrs=() netem_switch_out=""
  if [ -s "$switch_out" ]; then
    echo "netem: delay_switch: $(tail -n 1 "$switch_out")" >&2
  fi
  return "$left"
}
