/*
 * listenTcp(netnsPath, address, port)  a listening TCP socket (non-blocking, close-on-exec)
 *                           bound to `address:port` inside the network namespace mounted at
 *                           `netnsPath`, for `net.Server.listen({ fd })`.
 *
 * What a slot's guest calls on its gateway address (the volumes' NFS server) is served by
 * the server process itself, but the socket must live in the slot's namespace: there it is
 * reachable from the guest's tap and from nowhere else. A socket belongs to the namespace
 * it was created in, so this thread enters the slot's namespace for socket() alone and
 * comes straight back (setns affects the calling thread only); bind and listen then work on
 * that socket from the server's own namespace.
 *
 * bindUdp(netnsPath, address, port)  likewise, a bound UDP socket, for `dgram`'s bind({ fd }).
 * originalDestination(fd) -> "a.b.c.d:port"  where a connection accepted on such a socket was
 *                           sent before the namespace's nat REDIRECT brought it there
 *                           (SO_ORIGINAL_DST): the egress gate's listener.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <node_api.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/netfilter_ipv4.h>
#include <sys/socket.h>
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

/* A socket of `type` created inside the namespace `netns` (a descriptor); -errno on failure. */
static int socket_in(int netns, int type) {
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0) return -errno;
  if (setns(netns, CLONE_NEWNET) != 0) {
    int err = errno;
    close(self);
    return -err;
  }
  int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int err = errno;
  /* The server's thread must never stay in a slot's namespace: nothing sane follows. */
  if (setns(self, CLONE_NEWNET) != 0) abort();
  close(self);
  return fd >= 0 ? fd : -err;
}

/* The arguments every call takes: a namespace path, an IPv4 address and a port. */
static int where_args(napi_env env, napi_callback_info info, const char *usage, char *path,
                      size_t path_size, struct sockaddr_in *addr) {
  size_t argc = 3;
  napi_value argv[3];
  char address[INET_ADDRSTRLEN];
  int32_t port;
  memset(addr, 0, sizeof *addr);
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      string_arg(env, argv[0], path, path_size) != 0 ||
      string_arg(env, argv[1], address, sizeof address) != 0 ||
      napi_get_value_int32(env, argv[2], &port) != napi_ok || port < 1 || port > 65535 ||
      inet_pton(AF_INET, address, &addr->sin_addr) != 1) {
    napi_throw_type_error(env, NULL, usage);
    return -1;
  }
  addr->sin_family = AF_INET;
  addr->sin_port = htons((uint16_t)port);
  return 0;
}

/* A socket of `type` in the namespace at `path`, bound to `addr` (and listening, for TCP). */
static napi_value bound_in(napi_env env, const char *path, const struct sockaddr_in *addr,
                           int type) {
  int netns = open(path, O_RDONLY | O_CLOEXEC);
  if (netns < 0) return fail(env, path, errno);
  int fd = socket_in(netns, type);
  close(netns);
  if (fd < 0) return fail(env, "creating a socket in the slot's namespace", -fd);
  int one = 1;
  const char *failed = NULL;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) failed = "SO_REUSEADDR";
  else if (bind(fd, (const struct sockaddr *)addr, sizeof *addr) != 0) failed = "bind";
  else if (type == SOCK_STREAM && listen(fd, 128) != 0) failed = "listen";
  if (failed) {
    int err = errno;
    close(fd);
    return fail(env, failed, err);
  }
  napi_value result;
  napi_create_int32(env, fd, &result);
  return result;
}

/* listenTcp and bindUdp: the same arguments, a socket of another type. */
static napi_value socket_call(napi_env env, napi_callback_info info, int type, const char *usage) {
  char path[4096];
  struct sockaddr_in addr;
  if (where_args(env, info, usage, path, sizeof path, &addr) != 0) return NULL;
  return bound_in(env, path, &addr, type);
}

static napi_value listen_tcp(napi_env env, napi_callback_info info) {
  return socket_call(env, info, SOCK_STREAM,
                     "listenTcp(netnsPath, address, port): a path, an IPv4 address, 1-65535");
}

static napi_value bind_udp(napi_env env, napi_callback_info info) {
  return socket_call(env, info, SOCK_DGRAM,
                     "bindUdp(netnsPath, address, port): a path, an IPv4 address, 1-65535");
}

static napi_value original_destination(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) {
    napi_throw_type_error(env, NULL, "originalDestination(fd): a descriptor");
    return NULL;
  }
  struct sockaddr_in dst;
  socklen_t length = sizeof dst;
  if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &length) != 0)
    return fail(env, "SO_ORIGINAL_DST", errno);
  char text[INET_ADDRSTRLEN + 8];
  char address[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &dst.sin_addr, address, sizeof address);
  snprintf(text, sizeof text, "%s:%u", address, (unsigned)ntohs(dst.sin_port));
  napi_value result;
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &result);
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"listenTcp", NULL, listen_tcp, NULL, NULL, NULL, napi_default, NULL},
      {"bindUdp", NULL, bind_udp, NULL, NULL, NULL, napi_default, NULL},
      {"originalDestination", NULL, original_destination, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
