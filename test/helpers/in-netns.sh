#!/bin/sh
# in-netns.sh <netns> <stash dir> <command> [args...]: runs a command as a separate host
# would, in its own network namespace, and in its own mount namespace with a sysfs of that
# network namespace (as `ip netns exec` gives) but the host's cgroup hierarchies kept (which
# `ip netns exec` loses with the host's /sys), and a /run/netns of its own. Each step execs
# the next: the command keeps this script's pid. Namespaces and mounts the command makes stay
# in its mount namespace and go with it.
set -eu
case "${IN_NETNS_PHASE:-outer}" in
outer)
  IN_NETNS_PHASE=mounts exec unshare --mount --propagation private -- "$0" "$@"
  ;;
mounts)
  mkdir -p "$2"
  mount --rbind /sys/fs/cgroup "$2"
  IN_NETNS_PHASE=inner exec nsenter --net="/run/netns/$1" -- "$0" "$@"
  ;;
inner)
  mount -t sysfs sysfs /sys
  mount --rbind "$2" /sys/fs/cgroup
  # Namespaces named inside (ip netns add) are files in /run/netns: a directory of its own.
  mkdir -p /run/netns
  mount -t tmpfs -o mode=0755 tmpfs /run/netns
  shift 2
  unset IN_NETNS_PHASE
  exec "$@"
  ;;
esac
