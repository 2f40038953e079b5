/*
 * openForWriting(fd)  Whether any process holds the file behind `fd` (open read-only here)
 *                     open for writing, or mapped shared and writable: the kernel refuses a
 *                     read lease then (fcntl F_SETLEASE F_RDLCK fails with EAGAIN). Taken and
 *                     dropped at once when it is granted. Node has no fcntl; /proc/<pid>/fd
 *                     shows neither mappings nor io_uring's registered files, the kernel's
 *                     count of writers covers them all. Should anyone open the file for
 *                     writing while the lease is held, the kernel signals the holder: SIGURG
 *                     (ignored unless handled) rather than SIGIO, which would end the server.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static napi_value open_for_writing(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok) {
    napi_throw_type_error(env, NULL, "openForWriting(fd): a file descriptor is required");
    return NULL;
  }
  bool writers;
  if (fcntl(fd, F_SETSIG, SIGURG) != 0) {
    char text[256];
    snprintf(text, sizeof text, "fcntl(F_SETSIG): %s", strerror(errno));
    napi_throw_error(env, NULL, text);
    return NULL;
  }
  if (fcntl(fd, F_SETLEASE, F_RDLCK) == 0) {
    writers = false;
    if (fcntl(fd, F_SETLEASE, F_UNLCK) != 0) {
      char text[256];
      snprintf(text, sizeof text, "fcntl(F_SETLEASE, F_UNLCK): %s", strerror(errno));
      napi_throw_error(env, NULL, text);
      return NULL;
    }
  } else if (errno == EAGAIN) {
    writers = true;
  } else {
    char text[256];
    snprintf(text, sizeof text, "fcntl(F_SETLEASE, F_RDLCK): %s", strerror(errno));
    napi_throw_error(env, NULL, text);
    return NULL;
  }
  napi_value result;
  napi_get_boolean(env, writers, &result);
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"openForWriting", NULL, open_for_writing, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
