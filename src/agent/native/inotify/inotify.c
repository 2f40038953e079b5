/*
 * Minimal inotify binding for envd's directory watcher. fs.watch cannot tell a chmod from a
 * write or a rename from a delete; envd must report exactly those (CREATE, WRITE, REMOVE,
 * RENAME, CHMOD), so the agent reads raw inotify events.
 *
 * create(onReadable) -> handle   onReadable() is called when events are pending
 * read(handle)      -> [{wd, mask, cookie, name}]   drains pending events without blocking
 * addWatch(handle, path, mask) -> wd
 * rmWatch(handle, wd)
 * close(handle)
 */
#include <errno.h>
#include <node_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>
#include <uv.h>

typedef struct {
  int fd;
  int closed;      /* close requested: the poll handle is closing or closed */
  int uv_closed;   /* libuv finished closing the poll handle */
  int finalized;   /* the JS handle was garbage-collected */
  uv_poll_t poll;
  napi_env env;
  napi_ref callback;
  napi_async_context async;
} watcher_t;

#define CHECK(call)                                                          \
  do {                                                                       \
    if ((call) != napi_ok) {                                                 \
      napi_throw_error(env, NULL, "inotify addon: N-API call failed: " #call); \
      return NULL;                                                           \
    }                                                                        \
  } while (0)

static napi_value throw_errno(napi_env env, const char *syscall, int err) {
  char text[512];
  snprintf(text, sizeof text, "%s: %s", syscall, strerror(err));
  napi_value code, message, error, sys;
  napi_create_string_utf8(env, uv_err_name(-err), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &message);
  napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &sys);
  napi_create_error(env, code, message, &error);
  napi_set_named_property(env, error, "code", code);
  napi_set_named_property(env, error, "syscall", sys);
  napi_throw(env, error);
  return NULL;
}

static watcher_t *unwrap(napi_env env, napi_value value) {
  watcher_t *w = NULL;
  if (napi_get_value_external(env, value, (void **)&w) != napi_ok || w == NULL) {
    napi_throw_type_error(env, NULL, "expected an inotify handle");
    return NULL;
  }
  if (w->closed) {
    napi_throw_error(env, NULL, "inotify handle is closed");
    return NULL;
  }
  return w;
}

static void on_readable(uv_poll_t *handle, int status, int events) {
  (void)status;
  (void)events;
  watcher_t *w = handle->data;
  napi_env env = w->env;
  napi_handle_scope scope;
  napi_value cb, recv, result;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  if (napi_get_reference_value(env, w->callback, &cb) == napi_ok && napi_get_global(env, &recv) == napi_ok) {
    if (napi_make_callback(env, w->async, recv, cb, 0, NULL, &result) == napi_pending_exception) {
      napi_value exception;
      napi_get_and_clear_last_exception(env, &exception);
      napi_fatal_exception(env, exception);
    }
  }
  napi_close_handle_scope(env, scope);
}

/* The struct is freed once both libuv and the JS handle are done with it. */
static void on_closed(uv_handle_t *handle) {
  watcher_t *w = handle->data;
  close(w->fd);
  w->uv_closed = 1;
  if (w->finalized) free(w);
}

static void close_watcher(watcher_t *w) {
  if (w->closed) return;
  w->closed = 1;
  uv_poll_stop(&w->poll);
  napi_delete_reference(w->env, w->callback);
  napi_async_destroy(w->env, w->async);
  uv_close((uv_handle_t *)&w->poll, on_closed);
}

static void finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  watcher_t *w = data;
  w->finalized = 1;
  if (!w->closed) close_watcher(w);
  else if (w->uv_closed) free(w);
}

static napi_value create(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], name, handle;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  napi_valuetype type;
  CHECK(napi_typeof(env, argv[0], &type));
  if (argc < 1 || type != napi_function) {
    napi_throw_type_error(env, NULL, "create(onReadable) needs a function");
    return NULL;
  }
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return throw_errno(env, "inotify_init1", errno);
  watcher_t *w = calloc(1, sizeof *w);
  if (w == NULL) {
    close(fd);
    return throw_errno(env, "calloc", ENOMEM);
  }
  w->fd = fd;
  w->env = env;
  w->poll.data = w;
  uv_loop_t *loop;
  CHECK(napi_get_uv_event_loop(env, &loop));
  CHECK(napi_create_reference(env, argv[0], 1, &w->callback));
  CHECK(napi_create_string_utf8(env, "inotify", NAPI_AUTO_LENGTH, &name));
  CHECK(napi_async_init(env, NULL, name, &w->async));
  int err = uv_poll_init(loop, &w->poll, fd);
  if (err == 0) err = uv_poll_start(&w->poll, UV_READABLE, on_readable);
  if (err != 0) {
    close(fd);
    free(w);
    return throw_errno(env, "uv_poll", -err);
  }
  /* A watcher must not keep the agent alive on its own. */
  uv_unref((uv_handle_t *)&w->poll);
  CHECK(napi_create_external(env, w, finalize, NULL, &handle));
  return handle;
}

static napi_value read_events(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], list;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  watcher_t *w = unwrap(env, argv[0]);
  if (w == NULL) return NULL;
  CHECK(napi_create_array(env, &list));
  uint32_t count = 0;
  char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    ssize_t len = read(w->fd, buf, sizeof buf);
    if (len < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      return throw_errno(env, "read", errno);
    }
    if (len == 0) break;
    for (char *p = buf; p < buf + len;) {
      const struct inotify_event *ev = (const struct inotify_event *)p;
      napi_value item, wd, mask, cookie, name;
      CHECK(napi_create_object(env, &item));
      CHECK(napi_create_int32(env, ev->wd, &wd));
      CHECK(napi_create_uint32(env, ev->mask, &mask));
      CHECK(napi_create_uint32(env, ev->cookie, &cookie));
      CHECK(napi_create_string_utf8(env, ev->len ? ev->name : "", NAPI_AUTO_LENGTH, &name));
      CHECK(napi_set_named_property(env, item, "wd", wd));
      CHECK(napi_set_named_property(env, item, "mask", mask));
      CHECK(napi_set_named_property(env, item, "cookie", cookie));
      CHECK(napi_set_named_property(env, item, "name", name));
      CHECK(napi_set_element(env, list, count++, item));
      p += sizeof(struct inotify_event) + ev->len;
    }
  }
  return list;
}

static napi_value add_watch(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], result;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  watcher_t *w = unwrap(env, argv[0]);
  if (w == NULL) return NULL;
  char path[4096];
  size_t path_len;
  uint32_t mask;
  CHECK(napi_get_value_string_utf8(env, argv[1], path, sizeof path, &path_len));
  CHECK(napi_get_value_uint32(env, argv[2], &mask));
  int wd = inotify_add_watch(w->fd, path, mask);
  if (wd < 0) return throw_errno(env, "inotify_add_watch", errno);
  CHECK(napi_create_int32(env, wd, &result));
  return result;
}

static napi_value rm_watch(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  watcher_t *w = unwrap(env, argv[0]);
  if (w == NULL) return NULL;
  int32_t wd;
  CHECK(napi_get_value_int32(env, argv[1], &wd));
  /* EINVAL: the kernel already dropped the watch (its directory is gone). */
  if (inotify_rm_watch(w->fd, wd) < 0 && errno != EINVAL) return throw_errno(env, "inotify_rm_watch", errno);
  return NULL;
}

static napi_value close_handle(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  watcher_t *w = NULL;
  if (napi_get_value_external(env, argv[0], (void **)&w) == napi_ok && w != NULL) close_watcher(w);
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"create", NULL, create, NULL, NULL, NULL, napi_enumerable, NULL},
      {"read", NULL, read_events, NULL, NULL, NULL, napi_enumerable, NULL},
      {"addWatch", NULL, add_watch, NULL, NULL, NULL, napi_enumerable, NULL},
      {"rmWatch", NULL, rm_watch, NULL, NULL, NULL, napi_enumerable, NULL},
      {"close", NULL, close_handle, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
