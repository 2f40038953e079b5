/*
 * setMemoryMerge(on)  prctl(PR_SET_MEMORY_MERGE): lets KSM merge identical pages in all of
 *                     this process's memory, and in the memory of every process it starts
 *                     from now on (the flag survives fork and exec, Linux 6.4+). The server
 *                     turns it on around each QEMU spawn only: QEMU 7.2 has no such option.
 */
#include <errno.h>
#include <node_api.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#ifndef PR_SET_MEMORY_MERGE
#define PR_SET_MEMORY_MERGE 67
#endif

static napi_value set_memory_merge(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool on;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_bool(env, argv[0], &on) != napi_ok) {
    napi_throw_type_error(env, NULL, "setMemoryMerge(on): a boolean is required");
    return NULL;
  }
  if (prctl(PR_SET_MEMORY_MERGE, on ? 1 : 0, 0, 0, 0) != 0) {
    char text[256];
    snprintf(text, sizeof text, "prctl(PR_SET_MEMORY_MERGE): %s", strerror(errno));
    napi_throw_error(env, NULL, text);
  }
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"setMemoryMerge", NULL, set_memory_merge, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
