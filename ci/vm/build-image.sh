#!/usr/bin/env bash
# Builds the initramfs for the soft-RoCE VM: busybox, the kernel modules that
# rdma_rxe and rdma_cm need, the rxe verbs provider, the `rdma` tool, and the
# given binaries (each at /bin/<basename>) with every library they load.
#
# Usage: ci/vm/build-image.sh OUT.cpio.gz [BINARY...]
#
# Prints the path of the matching kernel image on stdout (nothing else goes
# to stdout). Installs its Debian packages if missing and caches the unpacked
# kernel package in ci/vm/cache/ (or $CATENA_VM_CACHE).
set -euo pipefail

prog=build-image.sh
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
fi
out=$1
shift
for bin in "$@"; do
  [[ -f $bin ]] || die "binary not found: $bin"
done

ensure_packages qemu-system-x86 busybox-static kmod cpio xz-utils iproute2 rdma-core \
  ibverbs-providers libibverbs-dev librdmacm-dev

vm_kernel

multiarch=x86_64-linux-gnu
# Modules to load, by name; modprobe expands each into its dependencies in
# load order. crc32_generic is not a symbol dependency of rdma_rxe but rxe's
# ICRC needs the "crc32" crypto algorithm it registers. sch_netem lets a
# test drop frames on a wire between two VMs (ci/vm/wire-chain.sh --loss).
wanted_modules=(virtio_pci virtio_net crc32_generic rdma_rxe rdma_ucm sch_netem)

stage=$(mktemp -d "${TMPDIR:-/tmp}/catena-vm-image.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# Merged-/usr layout like the host, so paths ldd reports resolve unchanged.
mkdir -p "$stage"/usr/{bin,sbin,lib/$multiarch,lib64} "$stage"/{etc,proc,sys,dev,tmp,run,root,results}
ln -s usr/bin "$stage/bin"
ln -s usr/sbin "$stage/sbin"
ln -s usr/lib "$stage/lib"
ln -s usr/lib64 "$stage/lib64"

# stage_path HOST_PATH -> path inside the image (under the merged /usr).
stage_path() {
  case $1 in
    /bin/* | /sbin/* | /lib/* | /lib64/*) echo "$stage/usr$1" ;;
    *) echo "$stage$1" ;;
  esac
}

# put SRC DEST_IN_IMAGE copies a file, following symlinks. It removes the
# destination first: it may be a busybox applet link, and copying through
# the link would overwrite busybox itself.
put() {
  local dest
  dest=$(stage_path "$2")
  mkdir -p "$(dirname "$dest")"
  rm -f "$dest"
  cp -L "$1" "$dest"
}

# put_libs FILE copies every shared library FILE loads, as ldd resolves them.
# Libraries outside the system directories (e.g. from a build tree via
# RUNPATH) go to the default search path under the name the binary asks for.
put_libs() {
  local file=$1 out line name path
  if ! out=$(ldd "$file" 2>&1); then
    case $out in
      *"not a dynamic executable"*) return 0 ;; # static binary or script
      *) die "ldd $file failed: $out" ;;
    esac
  fi
  while IFS= read -r line; do
    line=${line#"${line%%[![:space:]]*}"}
    case $line in
      linux-vdso.so.* | "") ;;
      *"=> not found"*) die "$file needs ${line%% *}, which ldd cannot find" ;;
      *" => "*)
        name=${line%% => *}
        path=${line#* => }
        path=${path%% (*}
        case $path in
          /lib/* | /lib64/* | /usr/lib/* | /usr/lib64/*) put "$path" "$path" ;;
          *) put "$path" "/usr/lib/$multiarch/$name" ;;
        esac
        ;;
      /*) put "${line%% (*}" "${line%% (*}" ;; # the dynamic loader
      *) die "unexpected ldd line for $file: $line" ;;
    esac
  done <<<"$out"
}

# busybox; init.sh installs its applet links at boot (one exec there instead
# of hundreds of forks here), and they never replace a real binary.
busybox=/bin/busybox
[[ -x $busybox ]] || die "$busybox missing (package busybox-static)"
put "$busybox" /usr/bin/busybox
put_libs "$busybox"

# PID 1 and its helpers.
put "$vm_dir/init.sh" /init
chmod 755 "$stage/init"

# Kernel modules, flattened, with the order to insmod them in.
modules_dir=$kernel_root/lib/modules/$kernel_ver
mkdir -p "$stage/usr/lib/modules/catena"
: >"$stage/etc/catena-modules"
declare -A seen_module=()
for m in "${wanted_modules[@]}"; do
  deps=$(modprobe -d "$kernel_root" -S "$kernel_ver" --show-depends "$m" 2>&1) \
    || die "modprobe cannot resolve module $m for $kernel_ver: $deps"
  while read -r kind path _; do
    [[ $kind == insmod ]] || continue # "builtin NAME": nothing to load
    [[ $path == "$modules_dir"/* ]] || die "unexpected module path $path"
    name=$(basename "$path" .ko)
    [[ -z ${seen_module[$name]:-} ]] || continue
    seen_module[$name]=1
    cp "$path" "$stage/usr/lib/modules/catena/$name.ko"
    echo "$name" >>"$stage/etc/catena-modules"
  done <<<"$deps"
done

# The verbs stack: rxe provider (dlopened by libibverbs, so ldd of the
# binaries never lists it), its driver file, and the `rdma` tool.
shopt -s nullglob
rxe_libs=("/usr/lib/$multiarch"/libibverbs/librxe-rdmav*.so)
shopt -u nullglob
((${#rxe_libs[@]} == 1)) || die "expected one librxe-rdmav*.so, found ${#rxe_libs[@]} (package ibverbs-providers)"
put "${rxe_libs[0]}" "${rxe_libs[0]}"
put_libs "${rxe_libs[0]}"
put /etc/libibverbs.d/rxe.driver /etc/libibverbs.d/rxe.driver
rdma_tool=$(command -v rdma) || die "the rdma tool is missing (package iproute2)"
put "$rdma_tool" /usr/bin/rdma
put_libs "$rdma_tool"
# glibc dlopens libgcc_s for unwinding on thread exit and cancellation; ldd
# does not list it, and without it pthread_exit aborts.
put "/usr/lib/$multiarch/libgcc_s.so.1" "/usr/lib/$multiarch/libgcc_s.so.1"

# The binaries under test.
for bin in "$@"; do
  put "$bin" "/usr/bin/$(basename "$bin")"
  chmod 755 "$stage/usr/bin/$(basename "$bin")"
  put_libs "$bin"
done

# Just enough /etc for name lookups and tools that ask who root is.
cat >"$stage/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
EOF
cat >"$stage/etc/group" <<'EOF'
root:x:0:
EOF
cat >"$stage/etc/hosts" <<'EOF'
127.0.0.1 localhost
10.0.2.15 catena-vm
EOF
echo 'hosts: files' >"$stage/etc/nsswitch.conf"
for f in /etc/services /etc/protocols; do
  [[ -f $f ]] && put "$f" "$f"
done

mkdir -p "$(dirname "$out")"
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) \
  | gzip -1 >"$out.tmp"
mv "$out.tmp" "$out"
note "wrote $out ($(du -h "$out" | cut -f1), kernel $kernel_ver, ${#seen_module[@]} modules)"
echo "$kernel_image"
