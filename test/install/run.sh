#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs a small program against the
# installed copy both ways: pkg-config (shared and static) and CMake find_package(linkd).
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)/consumer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib* | head -1)
export PKG_CONFIG_PATH="$libdir/pkgconfig"
want=$(mktemp -p "$tmp")
"$build"/test/install/expected_output > "$want"

check() { # name, command...
  local name=$1; shift
  if ! out=$("$@"); then echo "FAIL: $name exited non-zero"; exit 1; fi
  if [ "$out" != "$(cat "$want")" ]; then echo "FAIL: $name output differs"; echo "$out"; exit 1; fi
  echo "ok: $name"
}

for pc in linkd-core linkd; do
  cc -std=c11 -Wall -Werror -o "$tmp/$pc-shared" "$src/consumer.c" $(pkg-config --cflags --libs $pc)
  check "pkg-config $pc (shared)" env LD_LIBRARY_PATH="$libdir" "$tmp/$pc-shared"
  # liblinkd's archive with the system's shared libcurl (Debian ships no fully static curl chain).
  extra="-lpthread -lm"
  [ $pc = linkd ] && extra="$(pkg-config --libs libcurl) $extra"
  cc -std=c11 -Wall -Werror -o "$tmp/$pc-static" "$src/consumer.c" \
    $(pkg-config --cflags $pc) "$libdir/lib$pc.a" $extra
  check "pkg-config $pc (static)" "$tmp/$pc-static"
done
# The shared object carries SONAME = major version.
so=$(ls "$libdir"/liblinkd-core.so.*.*.* | head -1)
objdump -p "$so" | grep -q "SONAME *liblinkd-core.so.0" || { echo "FAIL: SONAME"; exit 1; }
echo "ok: SONAME"
# Only lk_ symbols are exported.
if nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^lk_' | grep -v '^_' | grep -q .; then
  echo "FAIL: non-lk_ symbols exported:"; nm -D --defined-only "$so" | grep -v ' lk_'; exit 1
fi
echo "ok: exports"

cmake -S "$src" -B "$tmp/cbuild" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cbuild" >/dev/null
check "find_package linkd::linkd" env LD_LIBRARY_PATH="$libdir" "$tmp/cbuild/consumer_shared"
check "find_package linkd::core_static" "$tmp/cbuild/consumer_core_static"
check "find_package linkd::linkd_static" "$tmp/cbuild/consumer_static"
echo "1 passed, 0 failed"
