# shellcheck shell=bash
# Shared helpers for the soft-RoCE VM scripts; sourced, never run.
# Callers set `prog` (used in messages) before sourcing.
prog=${prog:-catena-vm}

vm_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# One cache for the kernel and scratch images. CI clones afresh each run, so
# CATENA_VM_CACHE lets a runner point every clone at one persistent cache.
vm_cache=${CATENA_VM_CACHE:-$vm_dir/cache}

die() {
  echo "${prog}: error: $*" >&2
  exit 1
}

note() {
  echo "${prog}: $*" >&2
}

# ensure_packages PKG... installs whichever of the Debian packages are not
# installed yet. `apt-get update` runs only when something is missing, so a
# machine that already has everything never touches the network.
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$p")
    fi
  done
  ((${#missing[@]} == 0)) && return 0
  [[ $(id -u) -eq 0 ]] || die "missing packages (${missing[*]}) and not root: install them with apt-get"
  note "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
}

# vm_kernel sets kernel_root (the unpacked package), kernel_ver and
# kernel_image. It fetches the image package that linux-image-amd64 depends
# on, unpacks it once into the cache and runs depmod on it (the package ships
# no modules.dep). With no package lists and a cached kernel, it uses the
# newest cached one rather than failing offline.
vm_kernel() {
  local pkg="" dir tmp deb
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null \
    | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }') || true
  if [[ -z $pkg ]]; then
    dir=$(ls -d "$vm_cache"/kernel/linux-image-*/ 2>/dev/null | sort -V | tail -n 1) || true
    if [[ -n $dir && -e $dir/.complete ]]; then
      pkg=$(basename "$dir")
    else
      [[ $(id -u) -eq 0 ]] || die "cannot resolve linux-image-amd64 (no apt lists?) and not root"
      note "apt lists do not know linux-image-amd64; running apt-get update"
      apt-get update -qq || die "apt-get update failed"
      pkg=$(apt-cache depends linux-image-amd64 2>/dev/null \
        | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }') || true
      [[ -n $pkg ]] || die "linux-image-amd64 does not depend on a linux-image-X package"
    fi
  fi

  kernel_root=$vm_cache/kernel/$pkg
  mkdir -p "$vm_cache/kernel"
  # Parallel runs from one cache: the first unpacks, the others wait.
  local lock_fd
  exec {lock_fd}>"$vm_cache/kernel/.lock"
  flock "$lock_fd"
  if [[ ! -e $kernel_root/.complete ]]; then
    note "fetching and unpacking $pkg (once; cached in $vm_cache/kernel)"
    tmp=$(mktemp -d "$vm_cache/kernel/.unpack.XXXXXX")
    # apt's download sandbox user cannot write into a root-owned mktemp dir.
    (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg") \
      || { rm -rf "$tmp"; die "apt-get download $pkg failed"; }
    deb=$(ls "$tmp"/*.deb)
    dpkg -x "$deb" "$tmp/root" || { rm -rf "$tmp"; die "dpkg -x $deb failed"; }
    rm -f "$deb"
    kernel_ver=$(ls "$tmp/root/lib/modules")
    depmod -b "$tmp/root" "$kernel_ver" || { rm -rf "$tmp"; die "depmod failed"; }
    rm -rf "$kernel_root"
    mv "$tmp/root" "$kernel_root"
    rmdir "$tmp"
    touch "$kernel_root/.complete"
  fi
  kernel_ver=$(ls "$kernel_root/lib/modules")
  kernel_image=$kernel_root/boot/vmlinuz-$kernel_ver
  [[ -f $kernel_image ]] || die "no kernel image at $kernel_image (delete $kernel_root and retry)"
  vm_kernel_unpack_pvh
  exec {lock_fd}>&-
}

# The bzImage decompresses itself with xz, which under TCG costs ~5 s of
# every boot. A kernel built with CONFIG_PVH boots as a plain ELF instead
# (qemu -kernel uses its PVH entry), so decompress it once on the host. Any
# failure here only means the slower bzImage is used.
vm_kernel_unpack_pvh() {
  local vmlinux=$kernel_root/boot/vmlinux-$kernel_ver off
  if [[ ! -e $vmlinux && ! -e $vmlinux.none ]]; then
    if grep -qx 'CONFIG_PVH=y' "$kernel_root/boot/config-$kernel_ver" && command -v xz >/dev/null; then
      for off in $(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$kernel_image" | cut -d: -f1); do
        # xz stops after one stream, so tail gets SIGPIPE: keep it out of pipefail.
        if xz -dcq --single-stream < <(tail -c +$((off + 1)) "$kernel_image") >"$vmlinux.tmp" 2>/dev/null \
          && [[ $(head -c 4 "$vmlinux.tmp" | od -An -tx1 | tr -d ' ') == 7f454c46 ]]; then
          mv "$vmlinux.tmp" "$vmlinux"
          break
        fi
      done
      rm -f "$vmlinux.tmp"
    fi
    [[ -e $vmlinux ]] || touch "$vmlinux.none"
  fi
  [[ -e $vmlinux ]] && kernel_image=$vmlinux
  return 0
}
