/**
 * The initramfs's /init (busybox sh), per docs/guest-boot.md: load the modules listed in
 * /etc/modules, mount root= read-write and warren.agent= read-only at /.warren, move /dev,
 * /proc and /sys over and switch_root to init= (default /.warren/init). Any failure is printed
 * on the console and powers the VM off; nothing waits forever.
 */
export const INITRAMFS_INIT = `#!/bin/busybox sh
# Warren initramfs /init (docs/guest-boot.md)
b=/bin/busybox
export PATH=/bin

fail() {
  echo "warren initramfs: $*; powering off" >/dev/console
  $b poweroff -f
  exit 1 # power-off failed: PID 1 exits, the kernel panics and (panic=-1) resets
}

$b mount -t proc proc /proc || fail "cannot mount /proc"
$b mount -t sysfs sysfs /sys || fail "cannot mount /sys"
$b mount -t devtmpfs devtmpfs /dev || fail "cannot mount devtmpfs on /dev"

while read -r module; do
  $b insmod "/lib/modules/$module.ko" || fail "cannot load kernel module $module"
done </etc/modules

root=
fstype=ext4
mode=rw
agent=
init=/.warren/init
for arg in $($b cat /proc/cmdline); do
  case "$arg" in
  root=*) root=\${arg#root=} ;;
  rootfstype=*) fstype=\${arg#rootfstype=} ;;
  ro) mode=ro ;;
  rw) mode=rw ;;
  warren.agent=*) agent=\${arg#warren.agent=} ;;
  init=*) init=\${arg#init=} ;;
  esac
done
[ -n "$root" ] || fail "no root= on the kernel command line"

# A disk's node appears once its driver has probed it: at once in practice; 5 s at most.
wait_for() {
  case "$1" in /dev/*) ;; *) return 0 ;; esac
  tries=0
  while [ ! -b "$1" ]; do
    tries=$((tries + 1))
    [ "$tries" -le 500 ] || return 1
    $b usleep 10000
  done
}

wait_for "$root" || fail "root device $root did not appear"
$b mount -t "$fstype" -o "$mode" "$root" /newroot || fail "cannot mount $root ($fstype, $mode)"
if [ -n "$agent" ]; then
  wait_for "$agent" || fail "agent drive $agent did not appear"
  $b mkdir -p /newroot/.warren || fail "cannot create /.warren on $root"
  $b mount -t ext4 -o ro "$agent" /newroot/.warren || fail "cannot mount the agent drive $agent"
fi
[ -e "/newroot$init" ] || [ -L "/newroot$init" ] || fail "no $init on $root"

for dir in dev proc sys; do
  $b mkdir -p "/newroot/$dir" || fail "cannot create /$dir on $root"
  $b mount --move "/$dir" "/newroot/$dir" || fail "cannot move /$dir to $root"
done
exec $b switch_root /newroot "$init"
`;
