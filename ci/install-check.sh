#!/usr/bin/env bash
# ci/install-check.sh BUILD_DIR: Catena as a user installs and links it.
#   1. `cmake --install BUILD_DIR --prefix STAGE` (a staging prefix), and
#      each binary's --version; the SDK's boundary: every installed header
#      compiles alone with only STAGE/include, and includes nothing of
#      Thrift, Boost, chain, fabric or control; libcatena.so exports the
#      SDK's symbols and the C API, and none of the internals';
#   2. examples/ built against STAGE twice: CMake with find_package(Catena)
#      (CMAKE_PREFIX_PATH=STAGE) and make with pkg-config (PKG_CONFIG_PATH);
#   3. a local cluster of the staged binaries (`catena cluster up
#      --detach`): each build's publisher sends N records, its subscriber
#      must get exactly those N (every payload once), the C example
#      (examples/c, the C API, pkg-config build) must get back the N it
#      published, the Python example (examples/python, the staged module)
#      likewise, and the group consumer must consume them all as the only
#      member of a new group;
#   4. the .deb packages (cpack), each listing what it must hold.
# BUILD_DIR must have built catena, catenad, catena-controller and
# catena_sdk (libcatena.so). 34-55 s on 2 cores (2026-12-03; 109 s with the C
# example on a loaded machine, same day). KEEP=1 keeps
# the work directory (/tmp/catena-install-check.*: stage, outputs, .debs).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=$(realpath "${1:?usage: ci/install-check.sh BUILD_DIR}")
records=${RECORDS:-400}
work=$(mktemp -d /tmp/catena-install-check.XXXXXX)
stage=$work/stage
cluster=$work/cluster
cleanup() {
  if [ -f "$cluster/cluster.env" ]; then "$stage/bin/catena" cluster down --dir "$cluster" >/dev/null 2>&1 || true; fi
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
t0=$(date +%s)
step() { echo "--- install-check ($(( $(date +%s) - t0 ))s): $*"; }
fail() { echo "install-check: FAIL: $*" >&2; exit 1; }
# The records a program printed, sorted: its stdout without the library's
# log lines (spdlog's default logger writes "[date time] [level] ..." to
# stdout; the README says so under "Install and link").
records_of() { grep -v '^\[[0-9]\{4\}-[0-9][0-9]-[0-9][0-9] ' "$1" | sort || true; }

step "cmake --install $build --prefix $stage"
cmake --install "$build" --prefix "$stage" >/dev/null
libdir=$(sed -n 's/^libdir=${prefix}\///p' "$build/broker/packaging/catena.pc")
for f in bin/catena bin/catenad bin/catena-controller "$libdir/libcatena.so" include/catena/version.hpp \
  include/catena/client.hpp include/catena/client/admin.hpp include/catena/client/connect.hpp include/catena/broker/publisher.hpp include/catena/catena.h \
  "$libdir/cmake/Catena/CatenaConfig.cmake" "$libdir/cmake/Catena/CatenaConfigVersion.cmake" \
  "$libdir/pkgconfig/catena.pc"; do
  [ -e "$stage/$f" ] || fail "$f was not installed"
done
grep -q "^ExecStart=$stage/bin/catenad " "$stage/$libdir/systemd/system/catenad.service" ||
  fail "the installed catenad.service does not start $stage/bin/catenad"
version=$(sed -n 's/^#define CATENA_VERSION "\(.*\)"$/\1/p' "$stage/include/catena/version.hpp")
[ -n "$version" ] || fail "no CATENA_VERSION in version.hpp"
for b in catena catenad catena-controller; do
  [ "$("$stage/bin/$b" --version)" = "$version" ] || fail "$b --version is not $version"
  # The whole help first: piped into `head -1`, a help longer than what
  # head reads before it exits dies of SIGPIPE (the controller's did once
  # every flag named its CATENA_* variable), and pipefail fails on that.
  help=$("$stage/bin/$b" --help) || fail "$b --help exits non-zero"
  case "${help%%$'\n'*}" in *"$b $version"*) ;; *) fail "$b --help does not say $version" ;; esac
done

# The Python module, where the build made one (not in sanitizer builds).
pydir=lib/python3/dist-packages
pymod=""
if compgen -G "$build/python/catena.cpython-*.so" >/dev/null; then
  pymod=$(basename "$build"/python/catena.cpython-*.so)
  [ -f "$stage/$pydir/$pymod" ] || fail "$pydir/$pymod was not installed"
  found=$(ldd "$stage/$pydir/$pymod" | sed -n 's/^\s*libcatena\.so[.0-9]* => \(\S*\) .*/\1/p')
  [ -n "$found" ] && [ "$(realpath "$found")" = "$(realpath "$stage/$libdir/libcatena.so")" ] ||
    fail "the installed Python module does not find $stage/$libdir/libcatena.so: $(ldd "$stage/$pydir/$pymod" | grep catena)"
fi
step "the SDK's boundary: installed headers alone, libcatena.so's exported symbols"
for d in chain fabric control; do
  [ ! -e "$stage/include/catena/$d" ] || fail "include/catena/$d was installed (internal headers)"
done
headers=$(cd "$stage/include" && find catena -name '*.hpp' -o -name '*.h' | sort)
for h in $headers; do
  # Alone in a translation unit, with the stage's include directory only
  # (no Thrift or Boost include path; they would be in /usr/include, so the
  # dependency list is checked too).
  printf '#include <%s>\n' "$h" | c++ -std=c++20 -Wall -Wextra -Werror -fsyntax-only -x c++ -I"$stage/include" - ||
    fail "$h does not compile alone against $stage/include"
  deps=$(printf '#include <%s>\n' "$h" | c++ -std=c++20 -M -x c++ -I"$stage/include" - | tr ' \\' '\n\n' | grep -v '^$')
  bad=$(grep -E '/(thrift|boost)/|/catena/(chain|fabric|control)/' <<< "$deps" || true)
  [ -z "$bad" ] || fail "$h includes internals: $bad"
  outside=$(grep '/catena/' <<< "$deps" | grep -v "^$stage/include/" || true)
  [ -z "$outside" ] || fail "$h includes Catena headers from outside the stage: $outside"
done
printf '#include <catena/catena.h>\nint main(void) { return 0; }\n' |
  cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -x c -I"$stage/include" - || fail "catena.h does not compile as C"
syms=$(nm -D --defined-only "$stage/$libdir/libcatena.so" | c++filt)
for want in 'catena::connect(' 'catena::Publisher::create(' 'catena::Publisher::publish(' 'catena::PublishFuture::get(' \
  'catena::Subscriber::create(' 'catena::Subscriber::poll(' 'catena::GroupSubscriber::create(' 'catena::client::to_string(' \
  'catena::Admin::connect(' 'catena::Admin::create_channel(' ' catena_channel_create' ' catena_channel_list' ' catena_tenant_create' \
  'catena::client::Error::describe' 'typeinfo for catena::RouteSource' ' catena_connect' ' catena_publish' \
  ' catena_subscriber_poll' ' catena_version'; do
  grep -qF -- "$want" <<< "$syms" || fail "libcatena.so does not export $want"
done
# A symbol of the internals' own (a std:: template instantiated for one of
# their lambdas, e.g. a worker thread's state, may name them: weak, and
# harmless).
names=$(sed -E 's/^[0-9a-f]+ [A-Za-z] //; s/^(typeinfo name for|typeinfo for|vtable for|VTT for|guard variable for|construction vtable for) //' <<< "$syms")
leaked=$(grep -E '^catena::((chain|fabric|control|broker|detail|client_detail)::|StaticRoutes|[A-Za-z]+::Impl::)|^(apache::thrift|boost)::' <<< "$names" || true)
[ -z "$leaked" ] || fail "libcatena.so exports internals ($(grep -c . <<< "$leaked") symbols), e.g.: $(head -5 <<< "$leaked")"
echo "install-check: $(wc -w <<< "$headers") public headers compile alone; libcatena.so exports $(grep -c ' [TWVBDRu] ' <<< "$syms") symbols, none internal"

step "examples/ with CMake: find_package(Catena), CMAKE_PREFIX_PATH=$stage"
cmake -S examples -B "$work/ex-cmake" -G Ninja -DCMAKE_PREFIX_PATH="$stage" \
  -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$work/ex-cmake/bin" >/dev/null
ninja -C "$work/ex-cmake" >/dev/null
step "examples/ with make: pkg-config catena, PKG_CONFIG_PATH=$stage/$libdir/pkgconfig"
[ "$(PKG_CONFIG_PATH=$stage/$libdir/pkgconfig pkg-config --modversion catena)" = "$version" ] ||
  fail "pkg-config --modversion catena is not $version"
PKG_CONFIG_PATH=$stage/$libdir/pkgconfig CXXFLAGS=-O1 make -s -C examples -j2 OUT="$work/ex-pkg/bin" >/dev/null

step "a local cluster of the staged binaries"
"$stage/bin/catena" cluster up --detach --dir "$cluster" --nodes 3 --controller-port 0 > "$work/up.log" 2>&1 ||
  { cat "$work/up.log" >&2; fail "catena cluster up"; }
controller=$(sed -n 's/^CONTROLLER=//p' "$cluster/cluster.env")
[ -n "$controller" ] || fail "cluster up left no CONTROLLER in $cluster/cluster.env"
seq 0 $((records - 1)) | sed 's/^/record-/' | sort > "$work/expected"

# publisher then subscriber, one build's pair per channel
for kind in cmake pkg; do
  ex=$work/ex-$kind/bin
  "$stage/bin/catena" --controller "$controller" channel create "ex-$kind" --partitions 4 --replication 2 >/dev/null
  "$ex/publisher" "$controller" "ex-$kind" "$records" > "$work/acks-$kind" 2> "$work/pub-$kind.log" ||
    { cat "$work/pub-$kind.log" >&2; fail "$kind publisher"; }
  [ "$(records_of "$work/acks-$kind" | uniq | grep -c '^[0-9]*:[0-9]*$')" -eq "$records" ] ||
    fail "$kind publisher: $(records_of "$work/acks-$kind" | uniq | wc -l) distinct partition:offset acks, not $records"
  "$ex/subscriber" "$controller" "ex-$kind" "$records" 10000 > "$work/got-$kind" 2> "$work/sub-$kind.log" ||
    { cat "$work/sub-$kind.log" >&2; fail "$kind subscriber"; }
  records_of "$work/got-$kind" | diff -q - "$work/expected" >/dev/null ||
    fail "$kind subscriber: got $(records_of "$work/got-$kind" | wc -l) records, not the $records published (once each)"
  echo "install-check: $kind: published $records, subscriber got exactly them ($(tail -1 "$work/pub-$kind.log"))"
done
# The C API: the pkg-config build's c_pubsub publishes then reads its own channel.
"$stage/bin/catena" --controller "$controller" channel create ex-c --partitions 4 --replication 2 >/dev/null
"$work/ex-pkg/bin/c_pubsub" "$controller" ex-c "$records" > "$work/got-c" 2> "$work/c.log" ||
  { cat "$work/c.log" >&2; fail "C example (c_pubsub)"; }
records_of "$work/got-c" | diff -q - "$work/expected" >/dev/null ||
  fail "C example: got $(records_of "$work/got-c" | wc -l) records, not the $records published (once each)"
echo "install-check: C example: $(grep -c . "$work/got-c") records back ($(grep acknowledged "$work/c.log"))"
# A new group's only member is given every partition and starts at the earliest record.
"$work/ex-pkg/bin/group_consumer" "$controller" ex-cmake example-group 5 > "$work/got-group" 2> "$work/group.log" ||
  { cat "$work/group.log" >&2; fail "group consumer"; }
records_of "$work/got-group" | diff -q - "$work/expected" >/dev/null ||
  fail "group consumer: got $(records_of "$work/got-group" | wc -l) records, not the $records published (once each): $(cat "$work/group.log")"
echo "install-check: group consumer: $(tail -1 "$work/group.log")"
# Python: the staged module (not the build tree's) finds the staged
# libcatena.so by its RPATH.
if [ -n "$pymod" ]; then
  "$stage/bin/catena" --controller "$controller" channel create ex-py --partitions 4 --replication 2 >/dev/null
  PYTHONPATH=$stage/$pydir python3 examples/python/pubsub.py "$controller" ex-py "$records" > "$work/got-py" 2> "$work/py.log" ||
    { cat "$work/py.log" >&2; fail "Python example (examples/python/pubsub.py)"; }
  grep -qF "pubsub.py: $stage/$pydir/catena." "$work/py.log" || fail "Python imported catena from elsewhere: $(head -1 "$work/py.log")"
  records_of "$work/got-py" | diff -q - "$work/expected" >/dev/null ||
    fail "Python example: got $(records_of "$work/got-py" | wc -l) records, not the $records published (once each)"
  echo "install-check: Python example: $(grep -c . "$work/got-py") records back ($(grep acknowledged "$work/py.log"))"
fi
"$stage/bin/catena" cluster down --dir "$cluster" >/dev/null
rm -f "$cluster/cluster.env"

step "cpack: the .deb packages"
(cd "$work" && cpack --config "$build/CPackConfig.cmake" -B "$work/debs" >/dev/null)
check_deb() {  # check_deb GLOB PATH...: the one .deb matching GLOB lists every PATH
  local debs=("$work"/debs/$1) listing
  [ -f "${debs[0]}" ] || fail "no $1 built"
  listing=$(dpkg-deb -c "${debs[0]}")
  shift
  for p in "$@"; do grep -q " \./usr/$p\( \|$\)" <<< "$listing" || fail "$(basename "${debs[0]}") lacks /usr/$p"; done
  echo "install-check: $(basename "${debs[0]}"): $(dpkg-deb -f "${debs[0]}" Depends | cut -c1-110)"
}
check_deb "catena_${version}_*.deb" bin/catena bin/catenad bin/catena-controller \
  lib/systemd/system/catenad.service lib/systemd/system/catena-controller.service
dpkg-deb --fsys-tarfile "$work"/debs/catena_"${version}"_*.deb | tar -xO ./usr/lib/systemd/system/catenad.service |
  grep -q '^ExecStart=/usr/bin/catenad ' || fail "the packaged catenad.service does not start /usr/bin/catenad"
check_deb "libcatena*_${version}_*.deb" "lib/libcatena.so.$version"
check_deb "catena-dev_${version}_*.deb" lib/libcatena.so include/catena/client.hpp include/catena/broker/publisher.hpp include/catena/catena.h \
  include/catena/version.hpp lib/cmake/Catena/CatenaConfig.cmake lib/pkgconfig/catena.pc
if [ -n "$pymod" ]; then
  check_deb "python3-catena_${version}_*.deb" "$pydir/$pymod"
  dpkg-deb -f "$work"/debs/python3-catena_"${version}"_*.deb Depends | grep -q "libcatena" ||
    fail "python3-catena does not depend on libcatena"
fi
step "passed"
