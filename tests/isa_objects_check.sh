#!/bin/sh
# The objects compiled for a wider instruction set than the build's (files named *_avx2.cc and
# *_avx512.cc, built with -mavx2 or -mavx512f) run only after a check of the CPU. A function they
# define with vague linkage (an inline function or a template instance that other files may also
# define: std:: containers and algorithms, for instance) can be the copy the linker keeps for the
# whole program, and would then execute wide instructions on CPUs without them. This check fails
# when such an object defines a weak or unique symbol. DW.ref.__gxx_personality_v0 is let pass:
# a data word holding the address of the C++ unwinder's personality routine, the same in every
# object that has unwind tables with handlers (the sanitizer builds give these objects some), and
# no instruction of this object.
#
#   tests/isa_objects_check.sh BUILD_DIR
set -eu
build=${1:?usage: isa_objects_check.sh BUILD_DIR}
found=0
for o in $(find "$build" -name '*_avx2.cc.o' -o -name '*_avx512.cc.o' | sort); do
  found=$((found + 1))
  shared=$(nm -C --defined-only "$o" | awk '$2 ~ /^[WVu]$/ && $3 !~ /^DW\.ref\.__gxx_personality_v0$/')
  if [ -n "$shared" ]; then
    echo "FAIL: $o defines symbols that other objects may define too:"
    echo "$shared"
    exit 1
  fi
  echo "ok: $o defines no shared symbol"
done
if [ "$found" -lt 2 ]; then
  echo "FAIL: $found objects *_avx2.cc.o or *_avx512.cc.o under $build; expected the AVX2" \
    "interaction and the AVX-512 embedding kernels"
  exit 1
fi
