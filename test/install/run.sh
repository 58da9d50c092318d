#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the build tree into a temporary prefix, then builds and runs a small program against the
# installed copy both ways: pkg-config (shared and static) and CMake find_package(linkd). Then the
# same from a second, libraries-only build installed with Debian's multiarch libdir
# (lib/x86_64-linux-gnu: the .pc files' relative prefix has one more ".."), a core-only
# find_package consumer that must never look for curl, and linkd embedded with add_subdirectory()
# with LINKD_HTTP=OFF where none of the HTTP layer's or libraryd's dependencies can be found.
set -euo pipefail
build=$1
source_dir=$2
here=$(cd "$(dirname "$0")" && pwd)
src=$here/consumer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
want=$(mktemp -p "$tmp")
"$build"/test/install/expected_output > "$want"

check() { # name, command...
  local name=$1; shift
  if ! out=$("$@"); then echo "FAIL: $name exited non-zero"; exit 1; fi
  if [ "$out" != "$(cat "$want")" ]; then echo "FAIL: $name output differs"; echo "$out"; exit 1; fi
  echo "ok: $name"
}
quiet() { # command...: its output only when it fails
  local log; log=$(mktemp -p "$tmp")
  if ! "$@" >"$log" 2>&1; then cat "$log"; return 1; fi
}

# test_prefix <prefix> <libdir>: every consumer against one installed tree.
test_prefix() {
  local prefix=$1 libdir=$2 tag=$3
  export PKG_CONFIG_PATH="$libdir/pkgconfig"
  for pc in linkd-core linkd; do
    # The .pc file's own idea of where things are must be where they were installed.
    [ "$(pkg-config --variable=libdir $pc)" -ef "$libdir" ] ||
      { echo "FAIL: $tag $pc.pc libdir $(pkg-config --variable=libdir $pc) is not $libdir"; exit 1; }
    [ "$(pkg-config --variable=includedir $pc)" -ef "$prefix/include" ] ||
      { echo "FAIL: $tag $pc.pc includedir $(pkg-config --variable=includedir $pc)"; exit 1; }
    cc -std=c11 -Wall -Werror -o "$tmp/$pc-shared" "$src/consumer.c" $(pkg-config --cflags --libs $pc)
    check "$tag pkg-config $pc (shared)" env LD_LIBRARY_PATH="$libdir" "$tmp/$pc-shared"
    # liblinkd's archive with the system's shared libcurl (Debian ships no fully static curl chain).
    extra="-lpthread -lm"
    [ $pc = linkd ] && extra="$(pkg-config --libs libcurl) -lhttp_parser $extra"
    cc -std=c11 -Wall -Werror -o "$tmp/$pc-static" "$src/consumer.c" \
      $(pkg-config --cflags $pc) "$libdir/lib$pc.a" $extra
    check "$tag pkg-config $pc (static)" "$tmp/$pc-static"
  done
  unset PKG_CONFIG_PATH
  rm -rf "$tmp/cbuild"
  quiet cmake -S "$src" -B "$tmp/cbuild" -DCMAKE_PREFIX_PATH="$prefix"
  quiet cmake --build "$tmp/cbuild"
  check "$tag find_package linkd::linkd" env LD_LIBRARY_PATH="$libdir" "$tmp/cbuild/consumer_shared"
  check "$tag find_package linkd::core_static" "$tmp/cbuild/consumer_core_static"
  check "$tag find_package linkd::linkd_static" "$tmp/cbuild/consumer_static"
}

quiet cmake --install "$build" --prefix "$tmp/prefix"
libdir=$(ls -d "$tmp"/prefix/lib* | head -1)
test_prefix "$tmp/prefix" "$libdir" "[$(basename "$libdir")]"

# The shared object carries SONAME = major version.
so=$(ls "$libdir"/liblinkd-core.so.*.*.* | head -1)
objdump -p "$so" | grep -q "SONAME *liblinkd-core.so.0" || { echo "FAIL: SONAME"; exit 1; }
echo "ok: SONAME"
# Only lk_ symbols are exported.
if nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^lk_' | grep -v '^_' | grep -q .; then
  echo "FAIL: non-lk_ symbols exported:"; nm -D --defined-only "$so" | grep -v ' lk_'; exit 1
fi
echo "ok: exports"

# liblinkd-outbox: SONAME, only lk_ symbols, and a program that opens an outbox links through
# pkg-config and through find_package(linkd COMPONENTS outbox), shared and static.
oso=$(ls "$libdir"/liblinkd-outbox.so.*.*.* | head -1)
objdump -p "$oso" | grep -q "SONAME *liblinkd-outbox.so.0" || { echo "FAIL: outbox SONAME"; exit 1; }
if nm -D --defined-only "$oso" | awk '{print $3}' | grep -v '^lk_' | grep -v '^_' | grep -q .; then
  echo "FAIL: liblinkd-outbox exports non-lk_ symbols"; exit 1
fi
mkdir -p "$tmp/ob"
cat > "$tmp/ob/ob.c" <<'EOF'
#include <linkd/outbox.h>
#include <stdio.h>
int main(int argc, char **argv) {
  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = argc > 1 ? argv[1] : "ob.db";
  lk_outbox *ob = NULL;
  int rc = lk_outbox_open(&c, &ob, NULL, 0);
  lk_outbox_stats st = {0};
  if (rc == LK_OK)
    rc = lk_outbox_stats_get(ob, &st);
  lk_outbox_close(ob);
  printf("%s %lld\n", lk_err_name(rc), (long long)st.pending);
  return rc != LK_OK;
}
EOF
cat > "$tmp/ob/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(linkd_outbox_consumer C)
find_package(linkd 0.1 REQUIRED COMPONENTS outbox)
add_executable(ob_shared ob.c)
target_link_libraries(ob_shared PRIVATE linkd::outbox)
add_executable(ob_static ob.c)
target_link_libraries(ob_static PRIVATE linkd::outbox_static)
EOF
ob_check() { # name, command...: it must open a new outbox and find it empty
  local name=$1; shift
  rm -f "$tmp/ob/x.db" "$tmp/ob/x.db-wal" "$tmp/ob/x.db-shm"
  out=$("$@" "$tmp/ob/x.db") || { echo "FAIL: $name"; exit 1; }
  [ "$out" = "OK 0" ] || { echo "FAIL: $name printed '$out'"; exit 1; }
  echo "ok: $name"
}
# shellcheck disable=SC2046 # pkg-config's flags are meant to split
cc -std=c11 -Wall -Werror -o "$tmp/ob/pc" "$tmp/ob/ob.c" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs linkd-outbox)
ob_check "pkg-config linkd-outbox (shared)" env LD_LIBRARY_PATH="$libdir" "$tmp/ob/pc"
quiet cmake -S "$tmp/ob" -B "$tmp/ob/build" -DCMAKE_PREFIX_PATH="$tmp/prefix"
quiet cmake --build "$tmp/ob/build"
ob_check "find_package linkd::outbox" env LD_LIBRARY_PATH="$libdir" "$tmp/ob/build/ob_shared"
ob_check "find_package linkd::outbox_static" "$tmp/ob/build/ob_static"

# A core-only consumer: no find_package(CURL), no CURL_* variables, no HTTP targets.
quiet cmake -S "$here/consumer_core" -B "$tmp/corebuild" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_MODULE_PATH="$here/poison"
quiet cmake --build "$tmp/corebuild"
check "find_package(linkd COMPONENTS core), curl unfindable (shared)" \
  env LD_LIBRARY_PATH="$libdir" "$tmp/corebuild/consumer_core"
check "find_package(linkd COMPONENTS core), curl unfindable (static)" \
  "$tmp/corebuild/consumer_core_static"
# The poison works: the full package does look for curl.
if cmake -S "$src" -B "$tmp/poisoned" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
     -DCMAKE_MODULE_PATH="$here/poison" >/dev/null 2>&1; then
  echo "FAIL: find_package(linkd) with the http component did not look for curl"; exit 1
fi
echo "ok: find_package(linkd) (all components) looks for curl"

# Debian multiarch: a libraries-only build of the same sources installed to lib/x86_64-linux-gnu.
quiet cmake -S "$source_dir" -B "$tmp/mabuild" -DCMAKE_INSTALL_LIBDIR=lib/x86_64-linux-gnu \
  -DLINKD_PROGRAMS=OFF -DBUILD_TESTING=OFF -DLINKD_BENCH=OFF -DLINKD_EXAMPLES=OFF
quiet cmake --build "$tmp/mabuild" -j2
quiet cmake --install "$tmp/mabuild" --prefix "$tmp/maprefix"
[ -f "$tmp/maprefix/lib/x86_64-linux-gnu/pkgconfig/linkd.pc" ] || { echo "FAIL: multiarch"; exit 1; }
test_prefix "$tmp/maprefix" "$tmp/maprefix/lib/x86_64-linux-gnu" "[multiarch]"

# Embedded with add_subdirectory(), LINKD_HTTP=OFF: no pkg-config module and no curl findable.
mkdir -p "$tmp/empty-pc"
quiet env PKG_CONFIG_LIBDIR="$tmp/empty-pc" PKG_CONFIG_PATH= \
  cmake -S "$here/consumer_subdir" -B "$tmp/subbuild" -DLINKD_SOURCE_DIR="$source_dir" \
  -DCMAKE_MODULE_PATH="$here/poison"
quiet cmake --build "$tmp/subbuild" -j2
check "add_subdirectory, LINKD_HTTP=OFF, no HTTP dependencies" "$tmp/subbuild/consumer_core"
# linkd registers no tests of its own in a parent project.
n=$(ctest --test-dir "$tmp/subbuild" -N | sed -nE 's/^Total Tests: ([0-9]+)$/\1/p')
[ "$n" = 1 ] || { echo "FAIL: the parent project sees $n tests, want only its own 1"; exit 1; }
echo "ok: add_subdirectory adds no tests"
echo "1 passed, 0 failed"
