#!/bin/sh
# with_huge_pages.sh PAGES COMMAND...: runs COMMAND with PAGES more 2 MiB
# pages in the kernel's huge page pool, and puts the pool back after. Exits
# 77 (ctest's skip) where the pool cannot be raised (not root).
set -u
pages=$1
shift
pool=/proc/sys/vm/nr_hugepages
if [ "$(id -u)" != 0 ] || [ ! -w "$pool" ]; then
  echo "skipped: raising $pool needs root"
  exit 77
fi
before=$(cat "$pool")
echo $((before + pages)) > "$pool"
have=$(cat "$pool")
if [ "$have" -lt $((before + pages)) ]; then
  echo "$pool is $have after asking for $((before + pages)) (memory too fragmented?)" >&2
  echo "$before" > "$pool"
  exit 1
fi
"$@"
rc=$?
echo "$before" > "$pool"
exit $rc
