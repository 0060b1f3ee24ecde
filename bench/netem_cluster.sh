#!/usr/bin/env bash
# A dlrm cluster on an emulated network (docs/BENCHMARKS.md, "Emulated network"): the
# coordinator, each parameter server and each worker in its own network namespace, each with one
# link `eth0` to a switch in a namespace of its own, every link shaped to --rate per direction and
# --delay one way between two processes (bench/netem_lib.sh). The shaper is the best this kernel
# allows (or --shaper): netem, veth pairs to a bridge shaped by tc's netem qdisc; userspace (no
# sch_netem), TUN devices joined by build/bin/delay_switch (bench/delay_switch.cc), a userspace
# switch that serialises each packet at the rate on the sender's uplink and the receiver's
# downlink and delays it; tbf, veth pairs to a bridge shaped by tc's tbf, the rate only and no
# delay. Each process binds and advertises its namespace's address (10.213.X.0/24, which exists
# only inside these namespaces). For each requested
# combination of hot rows on/off and pipeline on/off it starts a fresh cluster with the flags
# `dlrm local` uses, submits the job with dlrmctl from the coordinator's namespace, waits for it
# and prints one JSON object:
#   samples_per_sec, auc, ps_bytes_per_sample, hot_hit_rate, train_seconds   the job's own final
#                           metrics (dlrmctl status; ps_bytes_per_sample is rank 0's gRPC bytes
#                           to and from the parameter servers, counted per message)
#   hot_set_rows            rows in the hot set at the end (the planner's choice under hot_budget)
#   network_bytes_per_sample_by_part   rank 0's bytes by purpose, counted where they are sent
#                           (worker/network_bytes.h: gRPC messages per method, collectives by
#                           their ring share), and its total: compare with wire_bytes_per_sample
#   wire_bytes_per_sample   bytes sent into the switch by every namespace (tx of each eth0: each
#                           byte counted once, where it is sent; IP packets with their headers, a
#                           GSO packet's headers once; a veth's count has each packet's Ethernet
#                           header, a TUN device's (userspace) has none) between submit and the
#                           job's end, over the samples trained; includes the job's start
#                           (LoadJob, hot-set sampling), the collectives, heartbeats and the final
#                           evaluation
#   wire_bytes_per_sample_by_role       the same by the role that sent them
#   received_bytes_per_sample_by_role   bytes delivered to each role (rx of each eth0): the PS's
#                           is what workers sent it; the workers' minus what the PS sent is about
#                           what the workers sent each other (the allreduces)
#   round_trip_ms           the round trip between the first worker's namespace and the
#                           coordinator's, measured before the job (median of 20 TCP connects
#                           to a closed port); --smoke checks it is twice the delay
#   job_seconds             submit to the job's end, as dlrmctl saw it
#   cpu_seconds_by_role, cpu_busy   CPU (user + system) of each process over the job; all of it
#                           over job_seconds x cores
#   machine_cpu_busy, other_cpu_seconds   the whole machine's busy share over the job, and the CPU
#                           seconds that were not this cluster's (other work, and the kernel's
#                           softirq time for the links, the delay_switch's); a busy machine makes
#                           samples/s noise
#   switch_cpu_seconds      userspace: the delay_switch's CPU seconds over the job (else null)
#   cluster_cpu_us_per_sample, machine_cpu_us_per_sample   CPU microseconds a sample: of the
#                           cluster's processes and the switch, and of the whole machine (busy),
#                           over the job (its start and final evaluation included); in the summary,
#                           cpu_per_sample_ratio_off_over_on is one arm's cluster figure over the
#                           other's: the samples/s ratio the arms would have if the cores were all
#                           that limited them
#   shaper_drops, shaper_overlimits packets the shapers dropped / held back to keep to the rate:
#                           the qdiscs' counts, and with userspace also the switch's (drops for
#                           any reason, packets that waited for a busy link; its counters by
#                           reason are printed on stderr when it stops)
#   shaper, delay_emulated  netem, userspace or tbf; false with tbf and a --delay other than 0
# and, when both sides of a comparison ran, one summary line with the ratios.
#
#   bench/netem_cluster.sh [BUILD_DIR] [flags]           (root; make netem NETEM_ARGS="...")
#     --build DIR          build folder holding bin/dlrm, bin/dlrmctl and bin/delay_switch
#                          (default: build)
#     --rate R             rate of each link, each direction, tc syntax (default 1gbit)
#     --delay D            one-way delay between two processes (default 1ms; 0: none)
#     --shaper S           netem, userspace or tbf (default: the first of these that works here;
#                          userspace needs the build's bin/delay_switch)
#     --mtu M              userspace: MTU of the TUN links (default 65000: TCP sends 64 KB
#                          segments, as GSO would, and few packets cross the switch; 1500 makes
#                          TCP's windows count Ethernet-sized segments, at many more packets)
#     --ps N --workers N   cluster size (default 2 and 2)
#     --config job.yaml    the job (default: generated, below); hot rows on uses its hot_budget
#     --rows N             samples to generate (default 400000; --smoke: 80000)
#     --max-rows R         cap of each kaggle-shape table, generated data and job (default 1000000)
#     --batch-size B       the generated job's global batch (default 4096: 2048 a worker)
#     --zipf S             Zipf exponent of the generated ids (default: dlrm gen-data's, 1.1)
#     --hot-budget B       hot_budget of the generated job (default auto, the service's default:
#                          the planner's choice under a 256 MiB ceiling)
#     --hot-rows on|off|both    --pipeline on|off|both    (default on, on)
#     --hot-sync-dtype T   training.hot_sync_dtype of the generated job: fp32, fp16, bf16 or fp8
#                          (default: unset, the tables' fp32)
#     --dense-sync-dtype T training.dense_sync_dtype of the generated job: fp32 (default) or bf16
#     --math-mode M        training.math_mode of the generated job: fp32 (default) or bf16 (the
#                          workers' GEMMs on bf16 operands; CPUs with AVX512_BF16 or AMX)
#     --dense-sync-compression C   training.dense_sync_compression of the generated job: none
#                          (default) or powersgd (rank 4, after --powersgd-warmup steps)
#     --hot-sample-batches N   training.hot_sample_batches of the generated job (default: unset,
#                          the service's 64: the batches the planner samples to choose the hot set)
#     --powersgd-warmup N  training.powersgd_warmup_steps with powersgd (default 10: the job has
#                          93 steps; the service's default of 1000 suits real jobs)
#     --hot-exchange overlapped|sync   how workers exchange hot-row gradients (default
#                          overlapped, the service's default: while the next step computes)
#     --dense-allreduce overlapped|sync|both   how workers allreduce the dense gradients
#                          (default overlapped, the service's default: in buckets while the
#                          backward runs; sync: after it, `dlrm worker --sync-dense-allreduce`)
#     --collectives direct|ring|both   how workers run their collectives (default direct, the
#                          service's default: payloads up to a few MiB by direct exchange, one
#                          message per peer; ring: Gloo's ring for all, `dlrm worker
#                          --ring-collectives`)
#     --device D           the workers' device: cpu (default: this script measures CPU workers'
#                          traffic), auto or cuda (worker i on CUDA device i, as `dlrm local`
#                          places them; NCCL needs one device a worker: with fewer GPUs, auto
#                          trains on the CPU and cuda stops)
#     --rounds N           run every combination N times, alternating (default 1); the summary
#                          compares medians (the byte counts repeat exactly; samples/s on a shared
#                          machine does not)
#     --smoke              two namespaces (coordinator and PS in one, a worker in the other) and
#                          the switch's; a tiny model, about 300 steps; checks the job and bytes
#     --keep               keep the work folder (data, job, logs) and print where it is
#     --job-timeout S      give up on a job after S seconds (default 900)
#     --skip-if-not-root   not root: say skipped and exit 77 instead of refusing (for ctest)
#
# Exit codes: 0 done; 1 a job or a check failed; 2 usage, or not root; 77 skipped: network
# namespaces cannot be created here (no CAP_NET_ADMIN, or no shaper works: no veth/bridge/tc
# support and no TUN devices), or the --shaper asked for does not work here.
# Everything it creates (processes, namespaces, links, the bridge, the switch process, the work
# folder) is removed on exit, also on Ctrl-C, SIGTERM or failure; a SIGKILLed run leaves
# namespaces dlrm-<pid>-* (and the delay_switch process in one of them, whose TUN devices go when
# it is killed), which `ip netns del` removes. With tbf every JSON line says "delay_emulated":
# false.
# shellcheck disable=SC2317  # cleanup runs via trap
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=bench/netem_lib.sh
. "$here/netem_lib.sh"

usage() { sed -n '/^#   bench\/netem_cluster.sh/,/^#     --skip-if-not-root/p' "$0" | cut -c3-; }
die_usage() { echo "netem_cluster: $1" >&2; usage >&2; exit 2; }

build=build rate=1gbit delay=1ms num_ps=2 num_workers=2 config="" rows="" max_rows=1000000
batch_size=4096 device=cpu
zipf="" hot_budget=auto hot_sync_dtype="" dense_sync_dtype=fp32 math_mode=fp32 dense_compression=none psgd_warmup=10 hot_sample_batches="" hot_mode=on pipe_mode=on hot_exchange=overlapped dense_mode=overlapped coll_mode=direct rounds=1 smoke=0 keep=0
job_timeout=900
skip_not_root=0 shaper=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build | --rate | --delay | --shaper | --mtu | --ps | --workers | --config | --rows | \
      --max-rows | --batch-size | --zipf | --hot-budget | --hot-sync-dtype | --hot-rows | \
      --pipeline | --hot-exchange | --rounds | --job-timeout | --dense-sync-dtype | \
      --dense-allreduce | --dense-sync-compression | --powersgd-warmup | --hot-sample-batches | \
      --collectives | --device)
      [ $# -ge 2 ] || die_usage "$1 needs a value" ;;
  esac
  case "$1" in
    --build) build="$2"; shift ;;
    --rate) rate="$2"; shift ;;
    --delay) delay="$2"; shift ;;
    --shaper) shaper="$2"; shift ;;
    --mtu) netem_tun_mtu="$2"; shift ;;
    --ps) num_ps="$2"; shift ;;
    --workers) num_workers="$2"; shift ;;
    --config) config="$2"; shift ;;
    --rows) rows="$2"; shift ;;
    --max-rows) max_rows="$2"; shift ;;
    --batch-size) batch_size="$2"; shift ;;
    --zipf) zipf="$2"; shift ;;
    --hot-budget) hot_budget="$2"; shift ;;
    --hot-sync-dtype) hot_sync_dtype="$2"; shift ;;
    --dense-sync-dtype) dense_sync_dtype="$2"; shift ;;
    --math-mode) math_mode="$2"; shift ;;
    --dense-sync-compression) dense_compression="$2"; shift ;;
    --powersgd-warmup) psgd_warmup="$2"; shift ;;
    --hot-sample-batches) hot_sample_batches="$2"; shift ;;
    --hot-rows) hot_mode="$2"; shift ;;
    --pipeline) pipe_mode="$2"; shift ;;
    --hot-exchange) hot_exchange="$2"; shift ;;
    --dense-allreduce) dense_mode="$2"; shift ;;
    --collectives) coll_mode="$2"; shift ;;
    --device) device="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --smoke) smoke=1 ;;
    --keep) keep=1 ;;
    --job-timeout) job_timeout="$2"; shift ;;
    --skip-if-not-root) skip_not_root=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) die_usage "unknown flag $1" ;;
    *) build="$1" ;;
  esac
  shift
done

positive() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die_usage "$1 $2: must be a positive integer"; }
positive --ps "$num_ps"
positive --workers "$num_workers"
positive --max-rows "$max_rows"
positive --batch-size "$batch_size"
positive --job-timeout "$job_timeout"
positive --rounds "$rounds"
[ -z "$rows" ] || positive --rows "$rows"
case "$hot_mode" in on | off | both) ;; *) die_usage "--hot-rows $hot_mode: on, off or both" ;; esac
case "$pipe_mode" in
  on | off | both) ;;
  *) die_usage "--pipeline $pipe_mode: on, off or both" ;;
esac
case "$hot_exchange" in
  overlapped | sync) ;;
  *) die_usage "--hot-exchange $hot_exchange: overlapped or sync" ;;
esac
case "$dense_mode" in
  overlapped | sync | both) ;;
  *) die_usage "--dense-allreduce $dense_mode: overlapped, sync or both" ;;
esac
case "$coll_mode" in
  direct | ring | both) ;;
  *) die_usage "--collectives $coll_mode: direct, ring or both" ;;
esac
case "$device" in cpu | auto | cuda) ;; *) die_usage "--device $device: cpu, auto or cuda" ;; esac
case "$shaper" in
  "" | netem | userspace | tbf) ;;
  *) die_usage "--shaper $shaper: netem, userspace or tbf" ;;
esac
rate_bits=$(netem_rate_bits "$rate") || die_usage "--rate $rate: e.g. 1gbit, 100mbit, 10gbit"
delay_us=$(netem_delay_us "$delay") || die_usage "--delay $delay: e.g. 1ms, 100us, 0"
[ "$rate_bits" -gt 0 ] || die_usage "--rate $rate: must be > 0"
if ! [[ "$netem_tun_mtu" =~ ^[0-9]+$ ]] || [ "$netem_tun_mtu" -lt 1280 ] ||
  [ "$netem_tun_mtu" -gt 65535 ]; then
  die_usage "--mtu $netem_tun_mtu: must be in [1280, 65535]"
fi
if [ "$smoke" = 1 ]; then num_ps=1 num_workers=1; fi
# Worker i trains on CUDA device i, as `dlrm local` places them: with fewer GPUs than workers,
# auto gives them none of their own (--cuda-device -1: the CPU) and cuda stops here.
cuda_devices=0
if [ "$device" != cpu ]; then
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    cuda_devices=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)
  elif command -v nvidia-smi >/dev/null; then
    cuda_devices=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  fi
  if [ "$cuda_devices" -lt "$num_workers" ] && [ "$device" = cuda ]; then
    need="$num_workers workers need $num_workers CUDA devices"
    die_usage "--device cuda: $need, $cuda_devices visible"
  fi
fi
if [ -n "$config" ]; then
  [ -f "$config" ] || die_usage "--config $config: no such file"
  config="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
fi
case "$build" in /*) ;; *) build="$(pwd)/$build" ;; esac
dlrm="$build/bin/dlrm"
dlrmctl="$build/bin/dlrmctl"
delay_switch="$build/bin/delay_switch"

if [ "$(id -u)" -ne 0 ]; then
  if [ "$skip_not_root" = 1 ]; then echo "skipped: netem_cluster needs root"; exit 77; fi
  echo "netem_cluster: must run as root (it creates network namespaces and tc qdiscs)" >&2
  exit 2
fi
for tool in ip tc python3; do
  command -v "$tool" >/dev/null ||
    { echo "skipped: no $tool (apt-get install iproute2 python3)"; exit 77; }
done
if [ ! -x "$dlrm" ] || [ ! -x "$dlrmctl" ]; then
  echo "netem_cluster: no $dlrm or $dlrmctl (make build)" >&2
  exit 2
fi
if ! netem_shaper=$(netem_probe "$delay_switch" "$shaper"); then
  if [ -n "$shaper" ]; then
    echo "skipped: --shaper $shaper does not work here: $netem_shaper"
  else
    echo "skipped: network namespaces are not available here: $netem_shaper"
  fi
  exit 77
fi
delay_emulated=true
if [ "$netem_shaper" = tbf ] && [ "$delay_us" != 0 ]; then
  why="--shaper tbf"
  [ -n "$shaper" ] || why="this kernel has no sch_netem, and TUN devices or $delay_switch are missing"
  echo "netem_cluster: WARNING: links are rate-shaped with tbf ($why), and the ${delay} delay" \
    "is NOT emulated" >&2
  delay_emulated=false
fi

cores=$(nproc)
clk_tck=$(getconf CLK_TCK)
work="$(mktemp -d /tmp/dlrm-netem-XXXXXX)"
proc_pids=() proc_names=() proc_roles=()
ctl_pid="" gen_pid=""

# round_trip_ms NS ADDR: the median of 20 TCP connects from namespace NS to port 9 of ADDR, where
# nothing listens: the reset comes back after one round trip (SYN out, RST back), with no server
# in the way. Prints milliseconds.
round_trip_ms() {
  ip netns exec "$1" python3 - "$2" <<'EOF'
import socket, statistics, sys, time
times = []
for _ in range(20):
    s = socket.socket()
    s.settimeout(2)
    start = time.perf_counter()
    try:
        s.connect((sys.argv[1], 9))
    except (ConnectionRefusedError, socket.timeout):
        pass
    times.append(time.perf_counter() - start)
    s.close()
print("%.3f" % (statistics.median(times) * 1000))
EOF
}

# nap SECONDS: a sleep that a signal to this script cuts short. Bash runs an INT trap only after
# the foreground command ends, and not at all when that command did not itself die of SIGINT (a
# `kill -INT` of the script alone); the wait builtin returns at once instead. (Each nap forks a
# `sleep`: at ten a second that cost the two cores about 5 % while a job ran, so the wait for a
# job naps 0.5 s. `read -t` forks nothing, but a SIGINT during it left bash to die silently later
# in the clean-up, with the namespaces still there.)
nap() {
  sleep "$1" &
  wait $! || true
}

# stop_processes: workers first, then parameter servers (both leave while the coordinator
# answers), then the coordinator; SIGTERM, then SIGKILL after 5 s.
stop_processes() {
  local i pid deadline pass
  for pass in worker ps ""; do
    for i in "${!proc_pids[@]}"; do
      [[ "${proc_roles[$i]}" != "$pass"* ]] || kill -TERM "${proc_pids[$i]}" 2>/dev/null || true
    done
    deadline=$((SECONDS + 5))
    for i in "${!proc_pids[@]}"; do
      [[ "${proc_roles[$i]}" == "$pass"* ]] || continue
      pid="${proc_pids[$i]}"
      while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.05; done
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    done
  done
  proc_pids=() proc_names=() proc_roles=()
  return 0
}

cleanup() {
  local rc=$?
  set +e
  trap '' INT TERM PIPE  # PIPE: a closed stderr must not stop the clean-up at its first message
  local pid
  for pid in $ctl_pid $gen_pid; do kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  stop_processes
  local made=${#netem_namespaces[@]}
  netem_teardown || rc=1
  if ip netns list | grep -q "^dlrm-$$-"; then
    echo "netem_cluster: namespaces left behind: $(ip netns list | grep "^dlrm-$$-")" >&2
    rc=1
  elif [ "$made" -gt 0 ]; then
    echo "netem_cluster: removed $made namespace(s) and their links" >&2
  fi
  if [ "$keep" = 1 ]; then
    echo "netem_cluster: kept $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Every run uses copies of the binaries taken now (a rebuild meanwhile changes nothing).
mkdir "$work/bin"
cp "$dlrm" "$dlrmctl" "$work/bin/"
dlrm="$work/bin/dlrm" dlrmctl="$work/bin/dlrmctl"
if [ "$netem_shaper" = userspace ]; then
  cp "$delay_switch" "$work/bin/"
  delay_switch="$work/bin/delay_switch"
fi

# A /24 from the pid; a clash is impossible (it exists only inside our namespaces), but one the
# host also uses would confuse whoever reads `ip route`, so it is skipped.
subnet_x=$(($$ % 250 + 1))
while ip -4 route show | grep -q "10\.213\.$subnet_x\."; do subnet_x=$((subnet_x % 250 + 1)); done
subnet="10.213.$subnet_x"
half_delay_us=$((delay_us / 2))

# The processes' namespaces: name, address and the roles inside.
netem_add_switch "dlrm-$$-switch"
ns_names=() ns_addrs=() ns_roles=()
add_ns() {
  local tag="$1" roles="$2" addr="$subnet.$((${#ns_names[@]} + 1))"
  ns_names+=("dlrm-$$-$tag") ns_addrs+=("$addr") ns_roles+=("$roles")
  netem_add_namespace "dlrm-$$-$tag" "$addr" "$rate_bits" "$half_delay_us"
}
if [ "$smoke" = 1 ]; then
  add_ns coord coordinator,ps
  add_ns w0 worker
  coord_ns=0 ps_ns=(0) worker_ns=(1)
else
  add_ns coord coordinator
  coord_ns=0 ps_ns=() worker_ns=()
  for ((i = 0; i < num_ps; i++)); do ps_ns+=(${#ns_names[@]}); add_ns "ps$i" ps; done
  for ((i = 0; i < num_workers; i++)); do worker_ns+=(${#ns_names[@]}); add_ns "w$i" worker; done
fi
netem_start_switch "$delay_switch" "$rate_bits" "$delay_us" "$work/delay_switch" || exit 1
coord_addr="${ns_addrs[$coord_ns]}:50051"
# Mutual TLS as a deployment runs it (plaintext off loopback is refused): one CA, certificates
# naming every namespace's address. The wire bytes counted below include TLS's framing.
tls="$work/tls"
tls_hosts=()
for addr in "${ns_addrs[@]}"; do tls_hosts+=(--host "$addr"); done
"$dlrm" certs --out "$tls" "${tls_hosts[@]}" >/dev/null
per_egress=""
[ "$netem_shaper" != netem ] || per_egress=" (per egress ${half_delay_us}us)"
echo "netem_cluster: ${#ns_names[@]} namespaces and a switch on $subnet.0/24," \
  "shaper $netem_shaper, rate $rate, one-way delay $delay$per_egress" >&2

# The data and the job.
if [ -n "$config" ]; then
  job="$config"
else
  [ -n "$rows" ] || { if [ "$smoke" = 1 ]; then rows=80000; else rows=400000; fi; }
  gen=(gen-data --out "$work/train.bin" --format binary --rows "$rows" --seed 7)
  if [ "$smoke" = 1 ]; then gen+=(--max-rows 1000); else gen+=(--max-rows "$max_rows"); fi
  [ -z "$zipf" ] || gen+=(--zipf "$zipf")
  echo "netem_cluster: generating $rows samples" >&2
  "$dlrm" "${gen[@]}" >"$work/gen.log" 2>&1 &
  gen_pid=$!
  wait "$gen_pid" || { cat "$work/gen.log" >&2; exit 1; }
  gen_pid=""
  job="$work/job.yaml"
  cards="[1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
                  14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]"
  if [ "$smoke" = 1 ]; then
    cat >"$job" <<EOF
name: netem-smoke
model: {dense_features: 13, bottom_mlp: [16, 8], top_mlp: [16, 1], embedding_dim: 8}
tables:
  cardinalities: $cards
  max_rows: 1000
training: {batch_size: 256, epochs: 1, seed: 11, staleness: 1, hot_budget: 64KiB,
           hot_refresh_steps: 100}
data: {train: [$work/train.bin], eval_fraction: 0.1}
EOF
  else
    psgd_job=""
    [ "$dense_compression" != powersgd ] || psgd_job=", powersgd_warmup_steps: $psgd_warmup"
    # The planner prices the link the cluster has (training.network_gbps), as a user would set it.
    gbps=$(awk -v b="$rate_bits" 'BEGIN { printf "%g", b / 1e9 }')
    cat >"$job" <<EOF
name: netem-kaggle-shape
model: {dense_features: 13, bottom_mlp: [512, 256, 64, 16], top_mlp: [512, 256, 1],
        embedding_dim: 16, pooling: sum}
tables:
  cardinalities: $cards
  max_rows: $max_rows
optimizer:
  dense: {type: adam, learning_rate: 0.001}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
training: {batch_size: $batch_size, epochs: 1, seed: 42, staleness: 1, network_gbps: $gbps,
           hot_budget: $hot_budget${hot_sample_batches:+, hot_sample_batches: $hot_sample_batches}${hot_sync_dtype:+, hot_sync_dtype: $hot_sync_dtype}, dense_sync_dtype: $dense_sync_dtype, dense_sync_compression: $dense_compression${psgd_job}, math_mode: $math_mode}
data: {train: [$work/train.bin], eval_fraction: 0.05}
EOF
  fi
fi

# spawn NAME ROLE NS_INDEX ARGS...: runs dlrm ARGS in the namespace, logging to the run folder.
spawn() {
  local name="$1" role="$2" ns="${ns_names[$3]}"
  shift 3
  ip netns exec "$ns" "$dlrm" "$@" --tls-dir "$tls/$role" >"$run_dir/logs/$name.log" 2>&1 &
  proc_pids+=($!) proc_names+=("$name") proc_roles+=("$role")
}
ctl() {
  ip netns exec "${ns_names[$coord_ns]}" "$dlrmctl" --coordinator "$coord_addr" \
    --tls-dir "$tls/admin" "$@"
}
# fail WHAT: the run failed; print the logs' tails and exit 1.
fail() {
  local f
  echo "netem_cluster: $1" >&2
  for f in "$run_dir"/logs/*.log "$run_dir"/submit.err; do
    [ -s "$f" ] && { echo "-- $f" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}
all_alive() {
  local pid
  for pid in "${proc_pids[@]}"; do kill -0 "$pid" 2>/dev/null || return 1; done
  netem_switch_running
}
# cpu_seconds PID: user + system CPU seconds of the process (all its threads).
cpu_seconds() {
  local stat rest
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
  rest="${stat##*) }"
  # shellcheck disable=SC2086  # split into the fields after "pid (comm)"
  set -- $rest
  awk -v u="${12}" -v s="${13}" -v t="$clk_tck" 'BEGIN { printf "%.2f\n", (u + s) / t }'
}
snapshot() {  # snapshot FILE: one line per namespace (tx bytes) and per process (CPU seconds)
  local i
  local drops overlimits tx rx counters
  for i in "${!ns_names[@]}"; do
    read -r tx rx < <(netem_link_bytes "${ns_names[$i]}")
    echo "ns ${ns_roles[$i]} $tx ${ns_names[$i]}"
    echo "rx ${ns_roles[$i]} $rx ${ns_names[$i]}"
    read -r drops overlimits < <(netem_qdisc_counters "${ns_names[$i]}")
    echo "drops - $drops ${ns_names[$i]}"
    echo "overlimits - $overlimits ${ns_names[$i]}"
  done >"$1"
  if [ "$netem_shaper" = userspace ]; then
    counters=$(netem_switch_counters) || fail "the delay_switch stopped"
    read -r drops overlimits <<<"$counters"
    {
      echo "drops - $drops delay_switch"
      echo "overlimits - $overlimits delay_switch"
      echo "switch_cpu - $(cpu_seconds "$netem_switch_pid") delay_switch"
    } >>"$1"
  fi
  for i in "${!proc_pids[@]}"; do
    echo "proc ${proc_roles[$i]} $(cpu_seconds "${proc_pids[$i]}") ${proc_names[$i]}"
  done >>"$1"
  # The whole machine's busy and total CPU seconds (all cores), to see what else ran meanwhile.
  awk -v t="$clk_tck" '/^cpu / { total = $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9
    printf "machine - %.2f busy\nmachine - %.2f total\n", (total - $5 - $6) / t, total / t }' \
    /proc/stat >>"$1"
}

run_one() {  # run_one HOT PIPELINE DENSE COLL ROUND (on|off, on|off, overlapped|sync, direct|ring, 1..)
  local hot="$1" pipe="$2" dense="$3" coll="$4" round="$5" i worker_args=()
  run_dir="$work/run-hot-$hot-pipeline-$pipe-dense-$dense-$coll-$round"
  mkdir -p "$run_dir/logs"
  echo "netem_cluster: run hot_rows=$hot pipeline=$pipe dense_allreduce=$dense" \
    "collectives=$coll round $round/$rounds" >&2
  spawn coordinator coordinator "$coord_ns" coordinator --listen "$coord_addr" \
    --data-dir "$run_dir/coordinator" --lease-ttl 14s --port-file "$run_dir/coordinator.port"
  for ((i = 0; i < 300; i++)); do
    [ ! -s "$run_dir/coordinator.port" ] || break
    all_alive || fail "the coordinator exited at start-up"
    nap 0.1
  done
  [ -s "$run_dir/coordinator.port" ] || fail "the coordinator did not start within 30 s"
  for i in "${!ps_ns[@]}"; do
    local addr="${ns_addrs[${ps_ns[$i]}]}:50061"
    spawn "ps-$i" ps "${ps_ns[$i]}" ps --coordinator "$coord_addr" --listen "$addr" \
      --advertise "$addr" --data-dir "$run_dir/ps-$i" --name "ps-$i"
  done
  [ "$hot" = on ] || worker_args+=(--no-hot-rows)
  [ "$pipe" = on ] || worker_args+=(--no-pipeline)
  [ "$hot_exchange" = overlapped ] || worker_args+=(--sync-hot-exchange)
  [ "$dense" = overlapped ] || worker_args+=(--sync-dense-allreduce)
  [ "$coll" = direct ] || worker_args+=(--ring-collectives)
  local threads=$((cores / num_workers))
  [ "$threads" -ge 1 ] || threads=1
  for i in "${!worker_ns[@]}"; do
    local cuda_device=$i
    [ "$cuda_devices" -ge "$num_workers" ] || cuda_device=-1
    spawn "worker-$i" worker "${worker_ns[$i]}" worker --coordinator "$coord_addr" \
      --device "$device" --cuda-device "$cuda_device" --advertise-host "${ns_addrs[${worker_ns[$i]}]}" \
      --threads "$threads" --name "worker-$i" "${worker_args[@]}"
  done
  local ready=""
  for ((i = 0; i < 600; i++)); do
    all_alive || fail "a process exited at start-up"
    ready=$(ctl --timeout 2 members -o json 2>/dev/null | python3 -c '
import json, sys
members = json.load(sys.stdin).get("members", [])
roles = [m.get("role") for m in members if m.get("state") == "MEMBER_STATE_ALIVE"]
print(roles.count("ROLE_PS"), roles.count("ROLE_WORKER"))
' 2>/dev/null) || true
    [ "$ready" = "${#ps_ns[@]} ${#worker_ns[@]}" ] && break
    nap 0.1
  done
  [ "$ready" = "${#ps_ns[@]} ${#worker_ns[@]}" ] ||
    fail "the cluster was not ready within 60 s (ps, workers alive: ${ready:-none})"

  # The round trip the processes see: before the counters are read, so its packets are not
  # counted.
  local rtt
  rtt=$(round_trip_ms "${ns_names[${worker_ns[0]}]}" "${ns_addrs[$coord_ns]}") || rtt=null
  snapshot "$run_dir/before"
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  # Not through ctl(): a function in the background is a subshell, and $! would be its pid.
  ip netns exec "${ns_names[$coord_ns]}" "$dlrmctl" --coordinator "$coord_addr" \
    --tls-dir "$tls/admin" submit -f "$job" \
    --workers "${#worker_ns[@]}" --ps "${#ps_ns[@]}" --wait -o json \
    >"$run_dir/final.json" 2>"$run_dir/submit.err" &
  ctl_pid=$!
  local deadline=$((SECONDS + job_timeout))
  while kill -0 "$ctl_pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
    netem_switch_running || fail "the delay_switch exited during the job"
    nap 0.5
  done
  if kill -0 "$ctl_pid" 2>/dev/null; then fail "the job did not end within $job_timeout s"; fi
  wait "$ctl_pid" || rc=$?
  ctl_pid=""
  # The job's end: when dlrmctl wrote its final status, not when the half-second nap noticed.
  if [ -s "$run_dir/final.json" ]; then
    t1=$(date -r "$run_dir/final.json" +%s.%N)
  else
    t1=$(date +%s.%N)
  fi
  snapshot "$run_dir/after"
  local job_id
  job_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job_id"])' \
    "$run_dir/final.json" 2>/dev/null) || fail "dlrmctl submit failed (exit $rc)"
  ctl status "$job_id" -o json >"$run_dir/status.json" || fail "dlrmctl status $job_id failed"
  if [ "$rc" != 0 ]; then
    fail "job $job_id did not succeed (dlrmctl exit $rc): $(python3 -c '
import json, sys
job = json.load(open(sys.argv[1]))
print(job["state"], job.get("message", ""))' "$run_dir/status.json")"
  fi
  stop_processes
  python3 - "$run_dir" "$t0" "$t1" "$cores" <<EOF | tee -a "$work/results.jsonl"
import json, sys
run_dir, t0, t1, cores = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
job = json.load(open(run_dir + "/status.json"))
fm, pm = job.get("final_metrics", {}), job.get("progress", {}).get("metrics", {})
def read(name):
    out = {}
    for line in open(f"{run_dir}/{name}"):
        kind, role, value, who = line.split()
        out[(kind, who)] = (role.replace(",", "+"), float(value))
    return out
before, after = read("before"), read("after")
samples = int(job.get("total_samples", 0)) or int(fm.get("samples", 0))
wire, received, cpu, qdisc, machine = {}, {}, {}, {}, {}
for key, (role, value) in after.items():
    delta = value - before.get(key, (role, 0.0))[1]
    into = {"ns": wire, "rx": received, "proc": cpu, "machine": machine}.get(key[0], qdisc)
    role = role if key[0] in ("ns", "rx", "proc") else key[1] if key[0] == "machine" else key[0]
    into[role] = into.get(role, 0) + delta
wire_total = sum(wire.values())
def per_sample(by_role):
    return {r: round(b / samples, 1) for r, b in sorted(by_role.items())} if samples else {}
seconds = t1 - t0
print(json.dumps({
    "bench": "netem_cluster", "smoke": $smoke == 1,
    "rate": "$rate", "delay": "$delay", "delay_emulated": "$delay_emulated" == "true",
    "shaper": "$netem_shaper", "ps": ${#ps_ns[@]}, "workers": ${#worker_ns[@]},
    "hot_rows": "$hot", "pipeline": "$pipe", "hot_exchange": "$hot_exchange",
    "dense_allreduce": "$dense", "collectives": "$coll",
    "hot_sync_dtype": "${hot_sync_dtype:-tables}", "dense_sync_dtype": "$dense_sync_dtype",
    "dense_sync_compression": "$dense_compression", "math_mode": "$math_mode",
    "round": $round,
    "samples": samples,
    "steps": int(fm.get("steps", 0)),
    "samples_per_sec": round(fm.get("samples_per_sec", 0), 1),
    "auc": round(fm.get("auc", 0), 5),
    "ps_bytes_per_sample": round(pm.get("ps_bytes_per_sample", 0), 1),
    "hot_hit_rate": round(pm.get("hot_hit_rate", 0), 4),
    "hot_set_rows": int(pm.get("hot_rows", 0)),
    "network_bytes_per_sample": round(pm.get("network_bytes_per_sample", 0), 1),
    "network_bytes_per_sample_by_part": {
        part: round(pm.get(f"network_{part}_bytes_per_sample", 0), 1)
        for part in ("ps_lookup", "ps_push", "hot_sync", "hot_migration", "dense_allreduce",
                     "control")},
    "wire_bytes": int(wire_total),
    "wire_bytes_per_sample": round(wire_total / samples, 1) if samples else None,
    "wire_bytes_per_sample_by_role": per_sample(wire),
    "received_bytes_per_sample_by_role": per_sample(received),
    "round_trip_ms": $rtt,
    "job_seconds": round(seconds, 2), "train_seconds": round(fm.get("train_seconds", 0), 2),
    "cpu_seconds_by_role": {r: round(c, 2) for r, c in sorted(cpu.items())},
    "cpu_busy": round(sum(cpu.values()) / (seconds * cores), 3), "cores": cores,
    "machine_cpu_busy":
        round(machine["busy"] / machine["total"], 3) if machine.get("total") else None,
    "other_cpu_seconds": round(max(0.0, machine.get("busy", 0) - sum(cpu.values())), 2),
    "cluster_cpu_us_per_sample":
        round(1e6 * (sum(cpu.values()) + qdisc.get("switch_cpu", 0)) / samples, 2)
        if samples else None,
    "machine_cpu_us_per_sample":
        round(1e6 * machine["busy"] / samples, 2) if samples and "busy" in machine else None,
    "shaper_drops": int(qdisc.get("drops", 0)),
    "shaper_overlimits": int(qdisc.get("overlimits", 0)),
    "switch_cpu_seconds":
        round(qdisc["switch_cpu"], 2) if "$netem_shaper" == "userspace" else None,
}))
EOF
}

hots=(on off) pipes=(on off) denses=(overlapped sync) colls=(direct ring)
[ "$hot_mode" = both ] || hots=("$hot_mode")
[ "$pipe_mode" = both ] || pipes=("$pipe_mode")
[ "$dense_mode" = both ] || denses=("$dense_mode")
[ "$coll_mode" = both ] || colls=("$coll_mode")
for ((round = 1; round <= rounds; round++)); do
  for hot in "${hots[@]}"; do
    for pipe in "${pipes[@]}"; do
      for dense in "${denses[@]}"; do
        for coll in "${colls[@]}"; do run_one "$hot" "$pipe" "$dense" "$coll" "$round"; done
      done
    done
  done
done

if [ "$smoke" = 1 ]; then
  # The PS is in the coordinator's namespace, the worker in the other: the worker's lookups and
  # pushes must have crossed the link, so the bytes counted there are at least that payload.
  python3 - "$work/results.jsonl" "$delay_us" <<'EOF' || exit 1
import json, sys
delay_ms = int(sys.argv[2]) / 1000
for line in open(sys.argv[1]):
    r = json.loads(line)
    by = r["wire_bytes_per_sample_by_role"]
    got, sent = r["received_bytes_per_sample_by_role"].get("coordinator+ps", 0), by.get("worker", 0)
    checks = {
        "job trained": r["samples"] > 0 and r["steps"] > 0,
        "AUC > 0.6 (planted signal learned)": r["auc"] > 0.6,
        "both namespaces sent bytes": all(by.get(k, 0) > 0 for k in ("coordinator+ps", "worker")),
        # Two namespaces: what one sent, the other received, through the bridge or the switch
        # (nothing bypassed the links). 1 %: ARP and IPv6 neighbour traffic the bridge floods or
        # drops.
        "received == sent across the link (%.1f, %.1f per sample)" % (got, sent):
            abs(got - sent) <= 0.01 * sent,
        "wire bytes >= PS payload (%.1f >= %.1f per sample)" % (r["wire_bytes_per_sample"],
                                                             r["ps_bytes_per_sample"]):
            r["wire_bytes_per_sample"] >= r["ps_bytes_per_sample"],
    }
    if r["delay_emulated"] and r["round_trip_ms"] is not None:
        # The delay is really there, each way: a round trip takes twice it (and little more).
        rtt = r["round_trip_ms"]
        checks["round trip %.2f ms ~ 2 x %g ms delay" % (rtt, delay_ms)] = (
            0.95 * 2 * delay_ms <= rtt <= 2 * delay_ms + 50)
    for what, ok in checks.items():
        print(("PASS  " if ok else "FAIL  ") + what, file=sys.stderr)
    if not all(checks.values()):
        sys.exit(1)
EOF
fi

python3 - "$work/results.jsonl" <<'EOF'
import json, statistics, sys
by_dense = {}
for r in map(json.loads, open(sys.argv[1])):
    by_dense.setdefault((r["hot_rows"], r["pipeline"], r["dense_allreduce"], r["collectives"]),
                        []).append(r)
keys = ("wire_bytes_per_sample", "ps_bytes_per_sample", "samples_per_sec", "auc",
        "cluster_cpu_us_per_sample")
all_runs = {k: {key: statistics.median(r.get(key) or 0 for r in rs) for key in keys}
            for k, rs in by_dense.items()}
summary = {}
# Each comparison holds the other settings at the default's value where both ran.
coll_used = "direct" if any(k[3] == "direct" for k in by_dense) else "ring"
for (hot, pipe, dense, coll), v in sorted(all_runs.items()):
    ring = all_runs.get((hot, pipe, dense, "ring"))
    if coll == "direct" and ring:
        summary[f"collectives_hot_rows_{hot}_pipeline_{pipe}_dense_{dense}"] = {
            "samples_per_sec_ratio_direct_over_ring":
                round(v["samples_per_sec"] / ring["samples_per_sec"], 3),
            "auc_direct_minus_ring": round(v["auc"] - ring["auc"], 5),
        }
    if coll != coll_used:
        continue
    sync = all_runs.get((hot, pipe, "sync", coll))
    if dense == "overlapped" and sync:
        summary[f"dense_allreduce_hot_rows_{hot}_pipeline_{pipe}"] = {
            "samples_per_sec_ratio_overlapped_over_sync":
                round(v["samples_per_sec"] / sync["samples_per_sec"], 3),
            "auc_overlapped_minus_sync": round(v["auc"] - sync["auc"], 5),
        }
# The other comparisons are made among runs with one way of allreducing (the default's when both
# ran).
dense_used = "overlapped" if any(k[2] == "overlapped" for k in by_dense) else "sync"
groups = {(h, p): rs for (h, p, d, c), rs in by_dense.items()
          if d == dense_used and c == coll_used}
runs = {(h, p): v for (h, p, d, c), v in all_runs.items() if d == dense_used and c == coll_used}
# The cluster's CPU per sample (its processes and the switch) of one arm over the other's: the
# samples/s ratio the two arms would have if the cores were all that limited them.
def cpu_ratio(a, b):
    ca, cb = a["cluster_cpu_us_per_sample"], b["cluster_cpu_us_per_sample"]
    return round(ca / cb, 3) if ca and cb else None
for pipe in ("on", "off"):
    on, off = runs.get(("on", pipe)), runs.get(("off", pipe))
    if on and off and on["wire_bytes_per_sample"] and off["wire_bytes_per_sample"]:
        summary[f"hot_rows_pipeline_{pipe}"] = {
            "wire_bytes_ratio_off_over_on":
                round(off["wire_bytes_per_sample"] / on["wire_bytes_per_sample"], 3),
            "ps_bytes_ratio_off_over_on":
                round(off["ps_bytes_per_sample"] / on["ps_bytes_per_sample"], 3)
                if on["ps_bytes_per_sample"] else None,
            "samples_per_sec_ratio_on_over_off":
                round(on["samples_per_sec"] / off["samples_per_sec"], 3),
            "auc_on_minus_off": round(on["auc"] - off["auc"], 5),
            "cpu_per_sample_ratio_off_over_on": cpu_ratio(off, on),
        }
for hot in ("on", "off"):
    on, off = runs.get((hot, "on")), runs.get((hot, "off"))
    if on and off:
        summary[f"pipeline_hot_rows_{hot}"] = {
            "samples_per_sec_ratio_on_over_off":
                round(on["samples_per_sec"] / off["samples_per_sec"], 3),
            "cpu_per_sample_ratio_off_over_on": cpu_ratio(off, on),
        }
if summary:
    first = next(iter(groups.values()))[0]
    print(json.dumps({
        "bench": "netem_cluster_summary", "rate": first["rate"], "delay": first["delay"],
        "delay_emulated": first["delay_emulated"], "rounds": max(map(len, groups.values())),
        "median_samples_per_sec": {f"hot_{h}_pipeline_{p}": v["samples_per_sec"]
                                   for (h, p), v in sorted(runs.items())},
        **summary}))
EOF
