#!/bin/bash
# netem_device.sh : bench/netem_cluster.sh on the GPU machine's 16 cores, to see which of its
# figures the two cores of the build machine limit (the GPU is not used).
#
#   bench/netem_device.sh pack [BUILD_DIR]
#       here: packs dlrm, dlrmctl, delay_switch, ip and tc with the shared libraries they need
#       (/work/shared/tools/device-bundle.sh) into .bundle/netem.tgz (git-ignored)
#   bench/netem_device.sh run BUNDLE_DIR CPUS -- [netem_cluster.sh flags]
#       there (root), after unpacking the archive to BUNDLE_DIR/..: runs netem_cluster.sh on the
#       bundle's binaries, pinned to CPUS (taskset syntax, e.g. 0-15 or 0,1: every process of the
#       cluster, the switch too, inherits it; nproc then counts those)
#
# The workers train on the CPU (netem_cluster.sh's default --device cpu), whatever the GPU.
# In one device call, e.g. all cores, then two of them:
#   run(command="mkdir -p /tmp/n && tar xzf .bundle/netem.tgz -C /tmp/n &&
#     bench/netem_device.sh run /tmp/n/netem 0-15 -- --rows 1600000 ... | tee $OUT/log",
#     carry=[".bundle"])
# The binaries run through wrappers that set LD_LIBRARY_PATH for them alone, so that the
# machine's own python3, ip and tc keep their libraries; the bundle's ip and tc are used only
# where the machine has none.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:?usage: netem_device.sh pack [BUILD_DIR] | run BUNDLE_DIR CPUS -- [flags]}
shift
case "$mode" in
  pack)
    build=${1:-build}
    cd "$root"
    for b in bin/dlrm bin/dlrmctl bin/delay_switch; do
      [[ -x "$build/$b" ]] || { echo "netem_device: $build/$b missing (make build)" >&2; exit 1; }
    done
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    # One binary a call: the tool fails on one that needs no library beyond glibc's (its
    # grep finds nothing), as delay_switch does; such a binary is copied alone.
    for b in "$build/bin/dlrm" "$build/bin/dlrmctl" "$build/bin/delay_switch" \
      "$(command -v ip)" "$(command -v tc)"; do
      bash /work/shared/tools/device-bundle.sh "$stage/netem" "$b" >/dev/null ||
        cp -L "$b" "$stage/netem/bin/"
    done
    mkdir -p .bundle
    tar czf .bundle/netem.tgz -C "$stage" netem
    ls -l .bundle/netem.tgz | awk '{print "netem_device: .bundle/netem.tgz, " $5 " bytes"}'
    ;;
  run)
    bundle=$(cd "${1:?bundle folder}" && pwd)
    cpus=${2:?cpus}
    shift 2
    [[ "${1:-}" == "--" ]] && shift
    wrap="$bundle/wrap"
    mkdir -p "$wrap/build/bin" "$wrap/path"
    # write_wrapper NAME FOLDER: FOLDER/NAME runs the bundle's NAME with the bundle's libraries.
    write_wrapper() {
      printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/bin/%s "$@"\n' "$bundle" "$bundle" "$1" \
        >"$2/$1"
      chmod +x "$2/$1"
    }
    for b in dlrm dlrmctl delay_switch; do write_wrapper "$b" "$wrap/build/bin"; done
    for tool in ip tc; do
      command -v "$tool" >/dev/null || write_wrapper "$tool" "$wrap/path"
    done
    export PATH="$PATH:$wrap/path"
    echo "netem_device: $(nproc --all) cores, running on $cpus;" \
      "ip $(command -v ip), tc $(command -v tc); $(uname -r)" >&2
    exec taskset -c "$cpus" bash "$root/bench/netem_cluster.sh" --build "$wrap/build" "$@"
    ;;
  *)
    echo "netem_device: unknown mode $mode (pack or run)" >&2
    exit 2
    ;;
esac
