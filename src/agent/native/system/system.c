/*
 * Privileged calls envd makes as the guest's root, without spawning a process.
 *
 * setRealtime(epochMs)  sets CLOCK_REALTIME (on every /init: a restored guest's clock lags by
 *                       however long its snapshot waited; spawning `date` cost ~0.5 s under TCG).
 * stopPitTimer() -> bool  stops channel 0 of the legacy PIT. Kernels before 6.10 leave it
 *                       running when the local APIC timer does the work ("x86/i8253: Disable
 *                       PIT timer 0 when not in use"), so the VMM raises a masked interrupt
 *                       ~36 times a second for nothing. False where there is no port access.
 * reseedKernel(seed)    mixes the host's seed from /init into the kernel's input pool, credited
 *                       (RNDADDENTROPY), then makes the CRNG rekey from it now (RNDRESEEDCRNG).
 *                       Every guest restored from one snapshot starts with the same CRNG key;
 *                       left alone the kernel would rekey only once its reseed interval (60 s)
 *                       has passed, and /dev/urandom would repeat across siblings until then.
 *                       Writing to /dev/urandom instead mixes without reseeding (and without
 *                       crediting), so it would not help before that interval either.
 * reseedOpenssl() -> bool  reseeds OpenSSL's primary DRBG in this process (crypto.randomBytes):
 *                       its state was cloned with the memory, and OpenSSL notices a fork by a
 *                       pid change, which a cloned VM does not have. False when the process has
 *                       no OpenSSL RAND_seed (a Node built without OpenSSL) or no entropy yet.
 * mount(source, target, fstype, options) -> Promise  mount(2) with text options, on the thread
 *                       pool: an NFS mount waits on its server (seconds when it is slow), and
 *                       envd's loop must keep answering meanwhile. Guest images need no
 *                       mount.nfs (nfs-common) for it: the kernel parses NFS's options itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <node_api.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <sys/io.h>
#define HAVE_PORT_IO 1
#endif

#define PIT_CH0 0x40
#define PIT_MODE 0x43

/* Larger seeds add nothing: the kernel hashes whatever it is given into a 256-bit pool. */
#define MAX_SEED_BYTES 512

/*
 * Node exports OpenSSL's symbols to addons (statically linked or not); weak, so that the addon
 * still loads in a Node without them and reseedOpenssl() says so instead.
 */
extern void RAND_seed(const void *buf, int num) __attribute__((weak));

static napi_value throw_errno(napi_env env, const char *syscall, int err) {
  char text[256];
  snprintf(text, sizeof text, "%s: %s", syscall, strerror(err));
  napi_throw_error(env, NULL, text);
  return NULL;
}

static napi_value set_realtime(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  double epoch_ms;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_double(env, argv[0], &epoch_ms) != napi_ok || !(epoch_ms > 0)) {
    napi_throw_type_error(env, NULL, "setRealtime(epochMs): a positive number is required");
    return NULL;
  }
  long long whole_ms = (long long)epoch_ms;
  struct timespec ts = {
      .tv_sec = whole_ms / 1000,
      .tv_nsec = (long)((epoch_ms - (double)(whole_ms - whole_ms % 1000)) * 1e6),
  };
  if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
  if (clock_settime(CLOCK_REALTIME, &ts) != 0) return throw_errno(env, "clock_settime", errno);
  return NULL;
}

static napi_value stop_pit_timer(napi_env env, napi_callback_info info) {
  (void)info;
  bool stopped = false;
#ifdef HAVE_PORT_IO
  if (ioperm(PIT_CH0, 4, 1) == 0) {
    /* Channel 0, lobyte/hibyte, mode 0 (one-shot), then a zero count: no more interrupts. */
    outb(0x30, PIT_MODE);
    outb(0, PIT_CH0);
    outb(0, PIT_CH0);
    ioperm(PIT_CH0, 4, 0);
    stopped = true;
  }
#endif
  napi_value result;
  napi_get_boolean(env, stopped, &result);
  return result;
}

static napi_value reseed_kernel(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool is_typed = false;
  napi_typedarray_type type;
  size_t length = 0;
  void *data = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_is_typedarray(env, argv[0], &is_typed) != napi_ok || !is_typed ||
      napi_get_typedarray_info(env, argv[0], &type, &length, &data, NULL, NULL) != napi_ok ||
      type != napi_uint8_array || length == 0 || length > MAX_SEED_BYTES) {
    napi_throw_type_error(env, NULL, "reseedKernel(seed): 1 to 512 bytes are required");
    return NULL;
  }
  union {
    struct rand_pool_info info;
    unsigned char raw[sizeof(struct rand_pool_info) + MAX_SEED_BYTES];
  } request;
  request.info.entropy_count = (int)length * 8;
  request.info.buf_size = (int)length;
  memcpy(request.info.buf, data, length);

  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    explicit_bzero(&request, sizeof request);
    return throw_errno(env, "open /dev/urandom", errno);
  }
  const char *failed = NULL;
  int err = 0;
  if (ioctl(fd, RNDADDENTROPY, &request) != 0) {
    failed = "ioctl RNDADDENTROPY";
    err = errno;
  } else if (ioctl(fd, RNDRESEEDCRNG) != 0) {
    failed = "ioctl RNDRESEEDCRNG";
    err = errno;
  }
  explicit_bzero(&request, sizeof request);
  close(fd);
  if (failed) return throw_errno(env, failed, err);
  return NULL;
}

static napi_value reseed_openssl(napi_env env, napi_callback_info info) {
  (void)info;
  bool reseeded = false;
  unsigned char fresh[32];
  /* RAND_seed reseeds the primary DRBG from the OS (now rekeyed) plus these bytes as
   * additional input; the per-thread DRBGs see the primary's new reseed count and follow. */
  if (RAND_seed != NULL &&
      getrandom(fresh, sizeof fresh, GRND_NONBLOCK) == (ssize_t)sizeof fresh) {
    RAND_seed(fresh, (int)sizeof fresh);
    reseeded = true;
  }
  explicit_bzero(fresh, sizeof fresh);
  napi_value result;
  napi_get_boolean(env, reseeded, &result);
  return result;
}

#define MAX_MOUNT_ARG 4096

struct mount_work {
  napi_async_work work;
  napi_deferred deferred;
  char source[MAX_MOUNT_ARG];
  char target[MAX_MOUNT_ARG];
  char fstype[64];
  char options[MAX_MOUNT_ARG];
  unsigned long flags;
  int err;
};

static void mount_execute(napi_env env, void *data) {
  (void)env;
  struct mount_work *w = data;
  w->err = mount(w->source, w->target, w->fstype, w->flags, w->options) == 0 ? 0 : errno;
}

static void mount_complete(napi_env env, napi_status status, void *data) {
  struct mount_work *w = data;
  napi_value outcome;
  if (status == napi_ok && w->err == 0) {
    napi_get_undefined(env, &outcome);
    napi_resolve_deferred(env, w->deferred, outcome);
  } else {
    char text[MAX_MOUNT_ARG + 64];
    snprintf(text, sizeof text, "mount %s: %s", w->target,
             strerror(status == napi_ok ? w->err : ECANCELED));
    napi_value message;
    napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &message);
    napi_create_error(env, NULL, message, &outcome);
    napi_reject_deferred(env, w->deferred, outcome);
  }
  napi_delete_async_work(env, w->work);
  free(w);
}

static int mount_arg(napi_env env, napi_value value, char *out, size_t size) {
  size_t length;
  if (napi_get_value_string_utf8(env, value, out, size, &length) != napi_ok) return -1;
  return length + 1 < size && strlen(out) == length ? 0 : -1; /* truncated, or a NUL inside */
}

static napi_value mount_fs(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  struct mount_work *w = calloc(1, sizeof *w);
  if (w == NULL) {
    napi_throw_error(env, NULL, "mount: out of memory");
    return NULL;
  }
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4 ||
      mount_arg(env, argv[0], w->source, sizeof w->source) != 0 ||
      mount_arg(env, argv[1], w->target, sizeof w->target) != 0 ||
      mount_arg(env, argv[2], w->fstype, sizeof w->fstype) != 0 ||
      mount_arg(env, argv[3], w->options, sizeof w->options) != 0) {
    free(w);
    napi_throw_type_error(env, NULL, "mount(source, target, fstype, options[, flags]): four strings");
    return NULL;
  }
  /* MS_* flags (a volume: MS_NOSUID | MS_NODEV); only these two are taken from JavaScript. */
  uint32_t flags = 0;
  if (argc >= 5 && napi_get_value_uint32(env, argv[4], &flags) != napi_ok) {
    free(w);
    napi_throw_type_error(env, NULL, "mount: flags must be a number");
    return NULL;
  }
  w->flags = flags & (MS_NOSUID | MS_NODEV);
  napi_value promise, name;
  napi_create_promise(env, &w->deferred, &promise);
  napi_create_string_utf8(env, "warren.mount", NAPI_AUTO_LENGTH, &name);
  napi_create_async_work(env, NULL, name, mount_execute, mount_complete, w, &w->work);
  napi_queue_async_work(env, w->work);
  return promise;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"setRealtime", NULL, set_realtime, NULL, NULL, NULL, napi_default, NULL},
      {"stopPitTimer", NULL, stop_pit_timer, NULL, NULL, NULL, napi_default, NULL},
      {"reseedKernel", NULL, reseed_kernel, NULL, NULL, NULL, napi_default, NULL},
      {"reseedOpenssl", NULL, reseed_openssl, NULL, NULL, NULL, napi_default, NULL},
      {"mount", NULL, mount_fs, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
