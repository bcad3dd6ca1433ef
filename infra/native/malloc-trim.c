// glibc's malloc_trim(0) and the free bytes its arenas hold (mallinfo2), for the memory keeper
// (infra/memory-keeper.ts). Why: see infra/malloc-trim.ts. A Node-API addon, so one build serves
// every Node version from 22 on.
#include <malloc.h>
#include <node_api.h>

/** trim(): returns true when memory was given back to the system. */
static napi_value Trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  napi_get_boolean(env, malloc_trim(0) == 1, &result);
  return result;
}

/** freeBytes(): bytes in free chunks across all arenas (mallinfo2's fordblks + fsmblks). */
static napi_value FreeBytes(napi_env env, napi_callback_info info) {
  (void)info;
  struct mallinfo2 stats = mallinfo2();
  napi_value result;
  napi_create_double(env, (double)(stats.fordblks + stats.fsmblks), &result);
  return result;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor functions[] = {
      {"trim", NULL, Trim, NULL, NULL, NULL, napi_default, NULL},
      {"freeBytes", NULL, FreeBytes, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof(functions) / sizeof(functions[0]), functions);
  return exports;
}
