/*
 * Two privileged calls envd makes as the guest's root, without spawning a process.
 *
 * setRealtime(epochMs)  sets CLOCK_REALTIME (on every /init: a restored guest's clock lags by
 *                       however long its snapshot waited; spawning `date` cost ~0.5 s under TCG).
 * stopPitTimer() -> bool  stops channel 0 of the legacy PIT. Kernels before 6.10 leave it
 *                       running when the local APIC timer does the work ("x86/i8253: Disable
 *                       PIT timer 0 when not in use"), so the VMM raises a masked interrupt
 *                       ~36 times a second for nothing. False where there is no port access.
 */
#include <errno.h>
#include <node_api.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <sys/io.h>
#define HAVE_PORT_IO 1
#endif

#define PIT_CH0 0x40
#define PIT_MODE 0x43

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

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"setRealtime", NULL, set_realtime, NULL, NULL, NULL, napi_default, NULL},
      {"stopPitTimer", NULL, stop_pit_timer, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
