/*
 * Starts a command with vfork() instead of fork().
 *
 * Node's child_process (libuv 1.46) forks envd, whose page tables span ~60 MiB: under TCG the
 * kernel copies them and the next writes each take a copy-on-write fault, all emulated, so
 * every command paid ~100-150 ms before its exec. A vfork child borrows envd's memory until
 * execve, so starting a command costs the same whatever envd's size.
 *
 * spawn(file, candidates, argv, envp, cwd, uid, gid, pipeStdin, onExit)
 *   -> { pid, stdin, stdout, stderr }   file descriptors (stdin -1 unless piped)
 *   candidates: the paths to try in order (the caller resolved `file` against PATH)
 *   onExit(code, signal) runs once when the child ends (one of them is null)
 *
 * The child runs only system calls between vfork and execve: it shares envd's memory and
 * glibc's setuid() would signal envd's other threads (nptl's setxid broadcast).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define MAX_ARGS 65536

typedef struct {
  pid_t pid;
  int pidfd;
  uv_poll_t poll;
  napi_env env;
  napi_ref callback;
  napi_async_context async;
} child_t;

#define CHECK(call)                                                          \
  do {                                                                       \
    if ((call) != napi_ok) {                                                 \
      napi_throw_error(env, NULL, "spawn addon: N-API call failed: " #call); \
      goto fail;                                                             \
    }                                                                        \
  } while (0)

static void throw_errno(napi_env env, const char *syscall, int err, const char *path) {
  char text[4200];
  snprintf(text, sizeof text, "%s %s: %s", syscall, path ? path : "", strerror(err));
  napi_value code, message, error;
  napi_create_string_utf8(env, uv_err_name(-err), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, code, message, &error);
  napi_set_named_property(env, error, "code", code);
  napi_throw(env, error);
}

/* A JS string as a malloc'd C string (NULL on failure, with a JS exception pending). */
static char *string_of(napi_env env, napi_value value) {
  size_t len;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "spawn: expected a string");
    return NULL;
  }
  char *text = malloc(len + 1);
  if (text == NULL) return NULL;
  napi_get_value_string_utf8(env, value, text, len + 1, &len);
  if (strlen(text) != len) { /* a NUL inside cannot cross execve */
    free(text);
    napi_throw_type_error(env, NULL, "spawn: a string holds a NUL byte");
    return NULL;
  }
  return text;
}

/* A JS array of strings as a NULL-terminated vector. */
static char **strings_of(napi_env env, napi_value array) {
  uint32_t count;
  if (napi_get_array_length(env, array, &count) != napi_ok || count >= MAX_ARGS) {
    napi_throw_type_error(env, NULL, "spawn: expected an array of strings");
    return NULL;
  }
  char **list = calloc(count + 1, sizeof *list);
  if (list == NULL) return NULL;
  for (uint32_t i = 0; i < count; i++) {
    napi_value item;
    if (napi_get_element(env, array, i, &item) != napi_ok || (list[i] = string_of(env, item)) == NULL) {
      for (uint32_t j = 0; j < i; j++) free(list[j]);
      free(list);
      return NULL;
    }
  }
  return list;
}

static void free_strings(char **list) {
  if (list == NULL) return;
  for (char **p = list; *p != NULL; p++) free(*p);
  free(list);
}

/* A close-on-exec descriptor above the standard three, so dup2 onto 0-2 never clobbers it. */
static int above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return moved;
}

static int make_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) < 0) return -1;
  fds[0] = above_stdio(fds[0]);
  fds[1] = above_stdio(fds[1]);
  return fds[0] < 0 || fds[1] < 0 ? -1 : 0;
}

static void close_pair(int fds[2]) {
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
}

/* What the child needs, in memory the parent keeps until vfork returns. */
typedef struct {
  char **candidates, **argv, **envp;
  const char *cwd;
  uid_t uid;
  gid_t gid;
  int in_fd, out_fd, err_fd;
  volatile int child_errno; /* set by the child when it cannot exec */
} child_args_t;

/* The vfork child: system calls only; never returns. */
static void __attribute__((noreturn, noinline)) child_main(child_args_t *a) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
  }
  if (syscall(SYS_dup2, a->in_fd, 0) < 0 || syscall(SYS_dup2, a->out_fd, 1) < 0 ||
      syscall(SYS_dup2, a->err_fd, 2) < 0)
    goto fail;
  /* Descriptors someone opened without O_CLOEXEC (a library, a parent) stay envd's. */
  syscall(SYS_close_range, 3, ~0U, 0);
  if (syscall(SYS_chdir, a->cwd) < 0) goto fail;
  /* Fails (EPERM) unless envd is root; then the child keeps envd's own groups, as libuv's. */
  syscall(SYS_setgroups, 0, NULL);
  if (syscall(SYS_setgid, a->gid) < 0 || syscall(SYS_setuid, a->uid) < 0) goto fail;
  sigset_t none;
  sigemptyset(&none);
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, _NSIG / 8);
  /* As execvp: the first error other than "not there" is the one reported. */
  int first = ENOENT;
  for (char **path = a->candidates; *path != NULL; path++) {
    syscall(SYS_execve, *path, a->argv, a->envp);
    if (errno != ENOENT && errno != ENOTDIR && first == ENOENT) first = errno;
  }
  errno = first;
fail:
  a->child_errno = errno;
  _exit(127);
}

/* vfork in a frame of its own, so no caller variable lives across the child's run. */
static pid_t __attribute__((noinline)) start_child(child_args_t *a) {
  sigset_t all, old;
  /* Signals stay blocked across vfork so that no envd handler runs in the child. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = vfork();
  if (pid == 0) child_main(a);
  int saved = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = saved;
  return pid;
}

static void on_closed(uv_handle_t *handle) {
  child_t *c = handle->data;
  close(c->pidfd);
  free(c);
}

static void on_exit_ready(uv_poll_t *handle, int status, int events) {
  (void)status;
  (void)events;
  child_t *c = handle->data;
  siginfo_t info;
  memset(&info, 0, sizeof info);
  int rc;
  do rc = waitid(P_PIDFD, c->pidfd, &info, WEXITED | WNOHANG);
  while (rc < 0 && errno == EINTR);
  if (rc == 0 && info.si_pid == 0) return; /* not ended yet: a spurious wake-up */
  napi_env env = c->env;
  uv_poll_stop(&c->poll);
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) == napi_ok) {
    napi_value cb, recv, args[2], result;
    napi_get_null(env, &args[0]);
    napi_get_null(env, &args[1]);
    if (rc < 0) {
      napi_create_int32(env, 127, &args[0]);
    } else if (info.si_code == CLD_EXITED) {
      napi_create_int32(env, info.si_status, &args[0]);
    } else {
      napi_create_int32(env, info.si_status, &args[1]);
    }
    if (napi_get_reference_value(env, c->callback, &cb) == napi_ok && napi_get_global(env, &recv) == napi_ok) {
      if (napi_make_callback(env, c->async, recv, cb, 2, args, &result) == napi_pending_exception) {
        napi_value exception;
        napi_get_and_clear_last_exception(env, &exception);
        napi_fatal_exception(env, exception);
      }
    }
    napi_close_handle_scope(env, scope);
  }
  napi_delete_reference(env, c->callback);
  napi_async_destroy(env, c->async);
  uv_close((uv_handle_t *)&c->poll, on_closed);
}

static napi_value set_fd(napi_env env, napi_value object, const char *name, int fd) {
  napi_value value;
  if (napi_create_int32(env, fd, &value) != napi_ok) return NULL;
  if (napi_set_named_property(env, object, name, value) != napi_ok) return NULL;
  return object;
}

static napi_value spawn_child(napi_env env, napi_callback_info info) {
  size_t argc = 9;
  napi_value argv_js[9], result = NULL;
  char *file = NULL, *cwd = NULL, **candidates = NULL, **argv = NULL, **envp = NULL;
  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, null_fd = -1;
  child_t *c = NULL;
  uint32_t uid, gid;
  bool pipe_stdin;
  napi_valuetype type;
  CHECK(napi_get_cb_info(env, info, &argc, argv_js, NULL, NULL));
  if (argc < 9 || napi_typeof(env, argv_js[8], &type) != napi_ok || type != napi_function) {
    napi_throw_type_error(env, NULL, "spawn(file, candidates, argv, envp, cwd, uid, gid, pipeStdin, onExit)");
    return NULL;
  }
  if ((file = string_of(env, argv_js[0])) == NULL || (candidates = strings_of(env, argv_js[1])) == NULL ||
      (argv = strings_of(env, argv_js[2])) == NULL || (envp = strings_of(env, argv_js[3])) == NULL ||
      (cwd = string_of(env, argv_js[4])) == NULL)
    goto fail;
  CHECK(napi_get_value_uint32(env, argv_js[5], &uid));
  CHECK(napi_get_value_uint32(env, argv_js[6], &gid));
  CHECK(napi_get_value_bool(env, argv_js[7], &pipe_stdin));

  if ((pipe_stdin ? make_pipe(in_pipe) : (null_fd = above_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC)))) < 0 ||
      make_pipe(out_pipe) < 0 || make_pipe(err_pipe) < 0) {
    throw_errno(env, "pipe", errno, NULL);
    goto fail;
  }
  c = calloc(1, sizeof *c);
  if (c == NULL) {
    throw_errno(env, "calloc", ENOMEM, NULL);
    goto fail;
  }

  child_args_t args = {
      .candidates = candidates,
      .argv = argv,
      .envp = envp,
      .cwd = cwd,
      .uid = uid,
      .gid = gid,
      .in_fd = pipe_stdin ? in_pipe[0] : null_fd,
      .out_fd = out_pipe[1],
      .err_fd = err_pipe[1],
      .child_errno = 0,
  };
  pid_t pid = start_child(&args);
  if (pid < 0) {
    throw_errno(env, "vfork", errno, NULL);
    goto fail;
  }
  if (args.child_errno != 0) {
    waitpid(pid, NULL, 0);
    throw_errno(env, "spawn", args.child_errno, file);
    goto fail;
  }
  c->pid = pid;
  c->env = env;
  c->poll.data = c;
  /* The child is a zombie at worst until we wait for it, so its pid cannot be reused here. */
  c->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  uv_loop_t *loop = NULL;
  napi_value name;
  int err = c->pidfd < 0 ? -errno : 0;
  if (err == 0 && (napi_get_uv_event_loop(env, &loop) != napi_ok ||
                   napi_create_string_utf8(env, "warren.spawn", NAPI_AUTO_LENGTH, &name) != napi_ok ||
                   napi_async_init(env, NULL, name, &c->async) != napi_ok))
    err = -ENOMEM;
  else if (err == 0 && napi_create_reference(env, argv_js[8], 1, &c->callback) != napi_ok) {
    napi_async_destroy(env, c->async);
    err = -ENOMEM;
  }
  bool polling = false;
  if (err == 0) err = uv_poll_init(loop, &c->poll, c->pidfd);
  if (err == 0) {
    polling = true;
    err = uv_poll_start(&c->poll, UV_READABLE, on_exit_ready);
  }
  if (err != 0) {
    /* Unwatchable: end it rather than leave a process nobody reports on. */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (c->callback != NULL) {
      napi_delete_reference(env, c->callback);
      napi_async_destroy(env, c->async);
    }
    if (polling) {
      uv_close((uv_handle_t *)&c->poll, on_closed); /* closes the pidfd and frees c */
      c = NULL;
    } else if (c->pidfd >= 0) {
      close(c->pidfd);
    }
    throw_errno(env, "watching the child", -err, NULL);
    goto fail;
  }
  c = NULL; /* owned by its poll handle now */

  close(pipe_stdin ? in_pipe[0] : null_fd);
  close(out_pipe[1]);
  close(err_pipe[1]);
  in_pipe[0] = out_pipe[1] = err_pipe[1] = null_fd = -1;
  napi_value object;
  CHECK(napi_create_object(env, &object));
  if (set_fd(env, object, "pid", pid) == NULL || set_fd(env, object, "stdin", in_pipe[1]) == NULL ||
      set_fd(env, object, "stdout", out_pipe[0]) == NULL || set_fd(env, object, "stderr", err_pipe[0]) == NULL)
    goto fail;
  result = object;
  in_pipe[1] = out_pipe[0] = err_pipe[0] = -1; /* JS owns the parent's ends now */

fail:
  free(c);
  close_pair(in_pipe);
  close_pair(out_pipe);
  close_pair(err_pipe);
  if (null_fd >= 0) close(null_fd);
  free(file);
  free(cwd);
  free_strings(candidates);
  free_strings(argv);
  free_strings(envp);
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"spawn", NULL, spawn_child, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
