#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the build tree into a temporary prefix, then builds and runs a small program against the
# installed copy both ways: pkg-config (shared and static) and CMake find_package(linkd). Then the
# same from a second, libraries-only build installed with Debian's multiarch libdir
# (lib/x86_64-linux-gnu: the .pc files' relative prefix has one more ".."), a core-only
# find_package consumer that must never look for curl, and linkd embedded with add_subdirectory():
# with LINKD_HTTP=OFF where none of the HTTP layer's or libraryd's dependencies can be found, by
# a parent that installs and exports a library of its own linking linkd (LINKD_INSTALL=ON), and
# with its defaults and EXCLUDE_FROM_ALL, where only what the parent links is built. Every
# installed library defines only lk_ symbols, every installed header compiles alone, and every
# function an installed header declares is in an installed library.
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

# check_symbols <libdir> <tag> <library>...: the static archive and the shared library of each
# <library> are there, and every global symbol any installed liblinkd* defines starts with lk_
# (internal cross-file functions are lk__*), so none can clash with a program's own.
check_symbols() {
  local libdir=$1 tag=$2 lib f bad; shift 2
  for lib in "$@"; do
    if [ ! -f "$libdir/$lib.a" ] || ! compgen -G "$libdir/$lib.so.*.*.*" >/dev/null; then
      echo "FAIL: $tag $lib.a or $lib.so.* not installed"; exit 1
    fi
  done
  for f in "$libdir"/liblinkd*.a "$libdir"/liblinkd*.so.*.*.*; do
    case $f in
      *.a) bad=$(nm -g --defined-only "$f" | awk 'NF == 3 {print $3}' | grep -v '^lk_' || true) ;;
      *) bad=$(nm -D --defined-only "$f" | awk 'NF == 3 {print $3}' |
                 grep -Ev '^(lk_|_init$|_fini$|_edata$|_end$|__bss_start$)' || true) ;;
    esac
    [ -z "$bad" ] ||
      { echo "FAIL: $tag $(basename "$f") defines non-lk_ symbols:"; echo "$bad"; exit 1; }
  done
  echo "ok: $tag only lk_ symbols in $*"
}

# check_headers <prefix> <libdir> <tag>: each installed header compiles on its own, and each
# function one declares (LK_EXPORT) is defined by an installed shared library.
check_headers() {
  local inc=$1/include libdir=$2 tag=$3 h missing headers
  headers=("$inc"/linkd/*.h)
  for h in "${headers[@]}"; do
    echo "#include <linkd/$(basename "$h")>" |
      cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$inc" -x c - ||
      { echo "FAIL: $tag <linkd/$(basename "$h")> does not compile alone"; exit 1; }
  done
  missing=$(comm -23 \
    <(sed -n 's/.*LK_EXPORT[^(]*[^a-z0-9_]\(lk_[a-z0-9_]*\)(.*/\1/p' "$inc"/linkd/*.h | sort -u) \
    <(for f in "$libdir"/liblinkd*.so; do nm -D --defined-only "$f"; done |
        awk '{print $3}' | sort -u))
  [ -z "$missing" ] || {
    echo "FAIL: $tag installed headers declare functions no installed library has:"
    echo "$missing"; exit 1
  }
  echo "ok: $tag headers (${#headers[@]}) compile alone, all they declare is installed"
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
    [ $pc = linkd ] && extra="$(pkg-config --libs libcurl zlib) -lhttp_parser $extra"
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

# The shared objects carry SONAME = major version.
for lib in liblinkd-core liblinkd liblinkd-outbox; do
  so=$(ls "$libdir/$lib".so.*.*.* | head -1)
  objdump -p "$so" | grep -q "SONAME *$lib.so.0" || { echo "FAIL: $lib SONAME"; exit 1; }
done
echo "ok: SONAME"
check_symbols "$libdir" "[prefix]" liblinkd-core liblinkd liblinkd-outbox
check_headers "$tmp/prefix" "$libdir" "[prefix]"

# liblinkd-outbox: a program that opens an outbox links through pkg-config and through
# find_package(linkd COMPONENTS outbox), shared and static. It calls lk_outbox_* only, so linked
# --as-needed (Debian's gcc default) it does not list liblinkd.so.0 itself, and it runs with no
# LD_LIBRARY_PATH, only its own rpath to the prefix: liblinkd-outbox.so must find liblinkd.so.0
# beside itself (RUNPATH $ORIGIN).
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
  printf("%s %lld\n", rc == LK_OK ? "OK" : "ERROR", (long long)st.pending);
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
cc -std=c11 -Wall -Werror -o "$tmp/ob/pc" "$tmp/ob/ob.c" -Wl,--as-needed -Wl,-rpath,"$libdir" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs linkd-outbox)
if readelf -d "$tmp/ob/pc" | grep NEEDED | grep -q 'liblinkd\.so'; then
  echo "FAIL: the outbox-only program lists liblinkd.so itself: it cannot test the RUNPATH"; exit 1
fi
# shellcheck disable=SC2016 # a literal $ORIGIN
readelf -d "$libdir/liblinkd-outbox.so" | grep -q 'RUNPATH.*\[\$ORIGIN\]' ||
  { echo "FAIL: liblinkd-outbox.so in $libdir has no RUNPATH \$ORIGIN"; exit 1; }
ob_check "pkg-config linkd-outbox (shared, --as-needed, no LD_LIBRARY_PATH)" "$tmp/ob/pc"
quiet cmake -S "$tmp/ob" -B "$tmp/ob/build" -DCMAKE_PREFIX_PATH="$tmp/prefix"
quiet cmake --build "$tmp/ob/build"
ob_check "find_package linkd::outbox" "$tmp/ob/build/ob_shared"
ob_check "find_package linkd::outbox_static" "$tmp/ob/build/ob_static"

# A core-only consumer: no find_package(CURL) or (SQLite3), no CURL_* variables, no HTTP targets.
quiet cmake -S "$here/consumer_core" -B "$tmp/corebuild" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_MODULE_PATH="$here/poison;$here/poison/sqlite"
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

# Debian multiarch: a libraries-only build of the same sources, configured as a distribution
# package is (prefix /usr), installed to lib/x86_64-linux-gnu. In a libdir the toolchain searches
# anyway the libraries carry no RUNPATH.
quiet cmake -S "$source_dir" -B "$tmp/mabuild" -DCMAKE_INSTALL_PREFIX=/usr \
  -DCMAKE_INSTALL_LIBDIR=lib/x86_64-linux-gnu \
  -DLINKD_PROGRAMS=OFF -DBUILD_TESTING=OFF -DLINKD_BENCH=OFF -DLINKD_EXAMPLES=OFF
quiet cmake --build "$tmp/mabuild" -j2
quiet cmake --install "$tmp/mabuild" --prefix "$tmp/maprefix"
malibdir=$tmp/maprefix/lib/x86_64-linux-gnu
[ -f "$malibdir/pkgconfig/linkd.pc" ] || { echo "FAIL: multiarch"; exit 1; }
test_prefix "$tmp/maprefix" "$malibdir" "[multiarch]"
check_symbols "$malibdir" "[multiarch]" liblinkd-core liblinkd liblinkd-outbox
if readelf -d "$malibdir"/liblinkd*.so | grep -Eq 'RUNPATH|RPATH'; then
  echo "FAIL: libraries configured for /usr/lib/x86_64-linux-gnu carry a RUNPATH"; exit 1
fi
echo "ok: [multiarch] no RUNPATH in a system libdir"

# Embedded with add_subdirectory(), LINKD_HTTP=OFF: no pkg-config module and no curl findable.
# The parent installs and exports a library of its own that links linkd::core_static, so it sets
# LINKD_INSTALL (README, "Installing and embedding"); the tree it installs holds liblinkd-core
# only, its headers and a linkd.h that includes them (no http.h, idem.h, outbox.h, linkd.pc).
# The parent's flags are stricter than linkd's own: -Wcast-qual -Werror reach the core's sources
# too (its queries on const objects load atomics through const pointers, without casts).
mkdir -p "$tmp/empty-pc"
quiet env PKG_CONFIG_LIBDIR="$tmp/empty-pc" PKG_CONFIG_PATH= \
  cmake -S "$here/consumer_subdir" -B "$tmp/subbuild" -DLINKD_SOURCE_DIR="$source_dir" \
  -DCMAKE_MODULE_PATH="$here/poison;$here/poison/sqlite" -DCMAKE_C_FLAGS="-Wcast-qual -Werror"
quiet cmake --build "$tmp/subbuild" -j2
check "add_subdirectory, LINKD_HTTP=OFF, no HTTP dependencies" "$tmp/subbuild/consumer_core"
# linkd registers no tests of its own in a parent project.
n=$(ctest --test-dir "$tmp/subbuild" -N | sed -nE 's/^Total Tests: ([0-9]+)$/\1/p')
[ "$n" = 1 ] || { echo "FAIL: the parent project sees $n tests, want only its own 1"; exit 1; }
echo "ok: add_subdirectory adds no tests"
quiet cmake --install "$tmp/subbuild" --prefix "$tmp/subprefix"
for f in include/linkd/http.h include/linkd/idem.h include/linkd/outbox.h include/linkd/shared.h \
         lib/pkgconfig/linkd.pc lib/pkgconfig/linkd-outbox.pc; do
  [ ! -e "$tmp/subprefix/$f" ] || { echo "FAIL: LINKD_HTTP=OFF installed $f"; exit 1; }
done
grep -q '#include <linkd/deadline.h>' "$tmp/subprefix/include/linkd/linkd.h" ||
  { echo "FAIL: the core-only linkd.h lost the core's headers"; exit 1; }
check_symbols "$tmp/subprefix/lib" "[LINKD_HTTP=OFF]" liblinkd-core
check_headers "$tmp/subprefix" "$tmp/subprefix/lib" "[LINKD_HTTP=OFF]"
# What the parent exported builds and links for its own users, linkd found beside it.
quiet cmake -S "$here/consumer_subdir/downstream" -B "$tmp/downbuild" \
  -DCMAKE_PREFIX_PATH="$tmp/subprefix" -DCMAKE_MODULE_PATH="$here/poison;$here/poison/sqlite"
quiet cmake --build "$tmp/downbuild"
"$tmp/downbuild/downstream" >/dev/null || { echo "FAIL: the parent's exported library"; exit 1; }
echo "ok: a parent's exported library linking linkd::core_static, installed with linkd"

# Embedded with its defaults and EXCLUDE_FROM_ALL by a parent that links linkd::core_static: the
# outbox is off (no SQLite3 findable, no pkg-config module), and only liblinkd-core.a is built.
quiet env PKG_CONFIG_LIBDIR="$tmp/empty-pc" PKG_CONFIG_PATH= \
  cmake -S "$here/consumer_defaults" -B "$tmp/defbuild" -DLINKD_SOURCE_DIR="$source_dir" \
  -DCMAKE_MODULE_PATH="$here/poison/sqlite"
quiet cmake --build "$tmp/defbuild" -j2
check "add_subdirectory EXCLUDE_FROM_ALL, defaults, no SQLite" "$tmp/defbuild/consumer_core"
built=$(cd "$tmp/defbuild" && find . -name 'liblinkd*' -type f | sort | tr '\n' ' ')
[ "$built" = "./linkd/liblinkd-core.a " ] ||
  { echo "FAIL: EXCLUDE_FROM_ALL built $built, want ./linkd/liblinkd-core.a only"; exit 1; }
echo "ok: EXCLUDE_FROM_ALL builds only what the parent links"
echo "1 passed, 0 failed"
