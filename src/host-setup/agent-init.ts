/**
 * The agent drive's `init` (busybox sh), PID 1 right after switch_root, per docs/guest-boot.md:
 * mounts what the rootfs lacks, sets the hostname, brings up lo and eth0 from warren.ip /
 * warren.gw, writes /etc/resolv.conf when absent (warren.dns, else 8.8.8.8), then execs tini →
 * envd through the drive's own loader. Every tool is the drive's busybox: the rootfs may have
 * none. Nothing here runs after the exec; an idle guest stays idle.
 */
export const AGENT_INIT = `#!/.warren/bin/busybox sh
# /.warren/init: the guest's PID-1 setup (docs/guest-boot.md), then tini runs envd.
w=/.warren
b=$w/bin/busybox
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
umask 022

fail() {
  echo "warren init: $*; powering off" >/dev/console
  $b sync
  $b poweroff -f
  exit 1 # power-off failed: PID 1 exits, the kernel panics and (panic=-1) resets
}

[ -e /proc/mounts ] || $b mount -t proc proc /proc || fail "cannot mount /proc"
mounted() { $b grep -q "^[^ ]* $1 " /proc/mounts; }
need_mount() { # fstype mountpoint options
  mounted "$2" && return 0
  $b mkdir -p "$2" || fail "cannot create $2"
  $b mount -t "$1" -o "$3" "$1" "$2" || fail "cannot mount $1 on $2"
}
need_mount sysfs /sys nosuid,nodev,noexec
need_mount devtmpfs /dev nosuid,mode=0755
need_mount devpts /dev/pts nosuid,noexec,gid=5,mode=0620,ptmxmode=0666
need_mount tmpfs /dev/shm nosuid,nodev,mode=1777
need_mount tmpfs /run nosuid,nodev,mode=0755
need_mount tmpfs /tmp nosuid,nodev,mode=1777
for link in fd:/proc/self/fd stdin:/proc/self/fd/0 stdout:/proc/self/fd/1 stderr:/proc/self/fd/2; do
  [ -e "/dev/\${link%%:*}" ] || [ -L "/dev/\${link%%:*}" ] || $b ln -s "\${link#*:}" "/dev/\${link%%:*}"
done

if [ -s /etc/hostname ]; then $b hostname -F /etc/hostname; else $b hostname sandbox; fi

ip=
gw=
dns=8.8.8.8
grow=
node_flags=
for arg in $($b cat /proc/cmdline); do
  case "$arg" in
  warren.ip=*) ip=\${arg#warren.ip=} ;;
  warren.gw=*) gw=\${arg#warren.gw=} ;;
  warren.dns=*) dns=\${arg#warren.dns=} ;;
  warren.grow=1) grow=1 ;;
  # Emulated CPU (TCG): V8's compilers only add fresh machine code for QEMU to translate;
  # envd's commands, files and /init run faster interpreted there. No memory reducer: its
  # full GC when envd falls idle (~40 s after a restore) wrote ~5 MiB of guest memory and
  # had ~4 MiB more code translated in every idle sandbox, to shrink a heap of a few MiB.
  warren.interpreted=1) node_flags="--no-opt --no-sparkplug --no-memory-reducer" ;;
  esac
done
# The VM's disk is larger than its image: grow the mounted root filesystem (ext4, online).
if [ -n "$grow" ]; then
  $w/lib/ld-linux-x86-64.so.2 --library-path $w/lib $w/bin/resize2fs /dev/vda >/dev/null 2>&1 ||
    echo "warren: could not grow the root filesystem on /dev/vda"
fi
$b ip link set lo up || fail "cannot bring up lo"
if [ -n "$ip" ]; then
  $b ip link set eth0 up || fail "cannot bring up eth0"
  $b ip addr add "$ip" dev eth0 || fail "cannot set address $ip on eth0"
  if [ -n "$gw" ]; then $b ip route add default via "$gw" || fail "cannot route via $gw"; fi
fi
if [ ! -e /etc/resolv.conf ]; then
  $b rm -f /etc/resolv.conf # a dangling symlink (systemd-resolved images)
  for server in $(echo "$dns" | $b tr , ' '); do echo "nameserver $server"; done >/etc/resolv.conf
fi
# E2B templates raise the inotify watch limit; envd's recursive watches need it.
echo 65536 >/proc/sys/fs/inotify/max_user_watches

cd /
exec $w/bin/tini -s -- $w/lib/ld-linux-x86-64.so.2 --library-path $w/lib \\
  $w/bin/node $node_flags $w/envd/envd.mjs --guest
`;
