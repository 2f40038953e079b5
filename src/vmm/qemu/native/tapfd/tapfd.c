/*
 * openTap(netnsPath, name)  an open descriptor on the tap `name` of the network namespace
 *                           mounted at `netnsPath`, for QEMU's `-netdev tap,fd=`. QEMU then
 *                           runs in an empty network namespace of its own: a VMM taken over
 *                           by its guest holds the guest's NIC and nothing else of the
 *                           network (src/vmm/README.md, "Containment").
 *
 * A tap belongs to the namespace /dev/net/tun was opened in, so this thread enters the
 * slot's namespace for the open() alone and comes straight back (setns affects the calling
 * thread only; nothing else runs on it meanwhile). The descriptor is close-on-exec: the
 * caller hands it to the one child that needs it (spawn's stdio), which gets it without.
 * Flags are QEMU's own for `ifname=` (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR), so a snapshot
 * taken with either way of attaching restores with the other.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <node_api.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static napi_value fail(napi_env env, const char *what, int err) {
  char text[4608];
  snprintf(text, sizeof text, "%s: %s", what, strerror(err));
  napi_throw_error(env, NULL, text);
  return NULL;
}

static int string_arg(napi_env env, napi_value value, char *out, size_t size) {
  size_t length;
  if (napi_get_value_string_utf8(env, value, out, size, &length) != napi_ok) return -1;
  return length + 1 < size ? 0 : -1; /* too long: truncated */
}

/* open("/dev/net/tun") inside the namespace `netns` (a descriptor on it); -errno on failure. */
static int open_tun_in(int netns) {
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0) return -errno;
  if (setns(netns, CLONE_NEWNET) != 0) {
    int err = errno;
    close(self);
    return -err;
  }
  int tun = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  int err = errno;
  /* The server's thread must never stay in a slot's namespace: nothing sane follows. */
  if (setns(self, CLONE_NEWNET) != 0) abort();
  close(self);
  return tun >= 0 ? tun : -err;
}

static napi_value open_tap(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  char path[4096];
  char name[IFNAMSIZ];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      string_arg(env, argv[0], path, sizeof path) != 0 ||
      string_arg(env, argv[1], name, sizeof name) != 0 || name[0] == '\0') {
    napi_throw_type_error(env, NULL, "openTap(netnsPath, name): two strings, name < 16 bytes");
    return NULL;
  }
  int netns = open(path, O_RDONLY | O_CLOEXEC);
  if (netns < 0) return fail(env, path, errno);
  int tun = open_tun_in(netns);
  close(netns);
  if (tun < 0) return fail(env, "opening /dev/net/tun in the slot's namespace", -tun);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  memcpy(ifr.ifr_name, name, strlen(name));
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  if (ioctl(tun, TUNSETIFF, &ifr) != 0) {
    int err = errno;
    close(tun);
    return fail(env, "attaching to the tap (TUNSETIFF)", err);
  }
  napi_value result;
  napi_create_int32(env, tun, &result);
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"openTap", NULL, open_tap, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
