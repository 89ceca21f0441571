/* A stand-in for libnvidia-ml.so.1, for tests on machines without a GPU.
 *
 * It exports the NVML entry points that the nvidia-ml-py binding (pynvml) looks up
 * for the calls kbench makes, with NVML's C signatures, so the binding's own ctypes
 * structures, version checks and error classes run against it. Its behaviour comes
 * from a text file named by KBENCH_NVML_STANDIN, read once at the first
 * nvmlInitWithFlags of the process: "key=value" lines, device keys suffixed by the
 * device index (see tests/nvml_standin/__init__.py, which writes it).
 *
 * Build switches (-D) remove entry points, as older drivers lack them:
 *   KB_NO_PROCESSES_V3   no nvmlDeviceGetComputeRunningProcesses_v3 (drivers < 510)
 *   KB_NO_MEMORY_V2      no nvmlDeviceGetMemoryInfo_v2 (drivers < 510)
 *   KB_NO_EVENT_REASONS  no nvmlDeviceGetCurrentClocksEventReasons (drivers < 535)
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEVICES 8
#define MAX_PROCS 16
#define MAX_FAILS 16
#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL

enum {
  OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3,
  INSUFFICIENT_SIZE = 7, GPU_IS_LOST = 15
};

typedef struct { unsigned int pid; unsigned long long usedGpuMemory;
                 unsigned int gpuInstanceId, computeInstanceId; } ProcessInfo;
typedef struct { unsigned long long total, free, used; } Memory;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } MemoryV2;
typedef struct { unsigned int gpu, memory; } Utilization;
typedef struct {
  char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} PciInfo;

typedef struct { char function[96]; int code; int after; int calls; } Fail;

typedef struct {
  char name[96], uuid[96], bus_id[32];
  unsigned long long memory_total, memory_used, memory_reserved;
  unsigned int gpu_util, mem_util, sm_clock, temperature;
  long long power_mw, energy_mj, energy_step_mj;   /* -1: NOT_SUPPORTED */
  unsigned long long reasons;
  int nprocs;
  long long proc_pid[MAX_PROCS];                   /* -1: every descendant of this process */
  unsigned long long proc_bytes[MAX_PROCS];
  Fail fails[MAX_FAILS];
  int nfails;
} Device;

static Device devices[MAX_DEVICES];
static int device_count = 0, loaded = 0, initialised = 0;
static Fail global_fails[MAX_FAILS];
static int nglobal_fails = 0;

static void add_fail(Fail *fails, int *n, const char *spec) {
  /* "function:code" or "function:code:after_n_successful_calls" */
  if (*n >= MAX_FAILS) return;
  Fail *f = &fails[(*n)++];
  memset(f, 0, sizeof *f);
  const char *colon = strchr(spec, ':');
  size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
  if (len >= sizeof f->function) len = sizeof f->function - 1;
  memcpy(f->function, spec, len);
  f->code = colon ? atoi(colon + 1) : 999;
  const char *second = colon ? strchr(colon + 1, ':') : NULL;
  f->after = second ? atoi(second + 1) : 0;
}

static void parse_procs(Device *d, char *value) {
  /* "pid:bytes,pid:na,children:bytes" */
  d->nprocs = 0;
  for (char *item = strtok(value, ","); item && d->nprocs < MAX_PROCS; item = strtok(NULL, ",")) {
    char *colon = strchr(item, ':');
    if (!colon) continue;
    *colon = 0;
    d->proc_pid[d->nprocs] = strcmp(item, "children") == 0 ? -1 : atoll(item);
    d->proc_bytes[d->nprocs] = strcmp(colon + 1, "na") == 0 ? NOT_AVAILABLE
                                                             : strtoull(colon + 1, NULL, 10);
    d->nprocs++;
  }
}

static void set_defaults(Device *d, int index) {
  memset(d, 0, sizeof *d);
  snprintf(d->name, sizeof d->name, "Stand-in GPU %d", index);
  snprintf(d->uuid, sizeof d->uuid, "GPU-00000000-0000-0000-0000-00000000000%d", index);
  snprintf(d->bus_id, sizeof d->bus_id, "00000000:%02X:00.0", index + 1);
  d->memory_total = 16ULL << 30;
  d->memory_used = 4ULL << 30;
  d->memory_reserved = 256ULL << 20;
  d->gpu_util = 57; d->mem_util = 23; d->sm_clock = 1410; d->temperature = 61;
  d->power_mw = 150000; d->energy_mj = 1000000; d->energy_step_mj = 1500;
}

static void load_config(void) {
  loaded = 1;
  device_count = 1;
  for (int i = 0; i < MAX_DEVICES; i++) set_defaults(&devices[i], i);
  const char *path = getenv("KBENCH_NVML_STANDIN");
  FILE *file = path ? fopen(path, "r") : NULL;
  if (!file) return;
  char line[4096];
  while (fgets(line, sizeof line, file)) {
    line[strcspn(line, "\r\n")] = 0;
    char *eq = strchr(line, '=');
    if (!eq) continue;
    *eq = 0;
    char *key = line, *value = eq + 1;
    if (strcmp(key, "devices") == 0) { device_count = atoi(value); continue; }
    if (strcmp(key, "fail") == 0) { add_fail(global_fails, &nglobal_fails, value); continue; }
    size_t k = strlen(key);
    while (k > 0 && key[k - 1] >= '0' && key[k - 1] <= '9') k--;
    if (k == strlen(key)) continue;
    int index = atoi(key + k);
    key[k] = 0;
    if (index < 0 || index >= MAX_DEVICES) continue;
    Device *d = &devices[index];
    if (!strcmp(key, "name")) snprintf(d->name, sizeof d->name, "%s", value);
    else if (!strcmp(key, "uuid")) snprintf(d->uuid, sizeof d->uuid, "%s", value);
    else if (!strcmp(key, "bus_id")) snprintf(d->bus_id, sizeof d->bus_id, "%s", value);
    else if (!strcmp(key, "memory_total")) d->memory_total = strtoull(value, NULL, 10);
    else if (!strcmp(key, "memory_used")) d->memory_used = strtoull(value, NULL, 10);
    else if (!strcmp(key, "memory_reserved")) d->memory_reserved = strtoull(value, NULL, 10);
    else if (!strcmp(key, "gpu_util")) d->gpu_util = (unsigned)atoi(value);
    else if (!strcmp(key, "mem_util")) d->mem_util = (unsigned)atoi(value);
    else if (!strcmp(key, "power_mw")) d->power_mw = atoll(value);
    else if (!strcmp(key, "energy_mj")) d->energy_mj = atoll(value);
    else if (!strcmp(key, "energy_step_mj")) d->energy_step_mj = atoll(value);
    else if (!strcmp(key, "reasons")) d->reasons = strtoull(value, NULL, 10);
    else if (!strcmp(key, "procs")) parse_procs(d, value);
    else if (!strcmp(key, "fail")) add_fail(d->fails, &d->nfails, value);
  }
  fclose(file);
}

static int check_fail(Fail *fails, int n, const char *function) {
  for (int i = 0; i < n; i++) {
    if (strcmp(fails[i].function, function) == 0) {
      if (fails[i].calls++ >= fails[i].after) return fails[i].code;
    }
  }
  return OK;
}

/* A handle is a pointer into devices[]; checks it and the per-device failures. */
#define DEVICE(handle, function)                                                  \
  if (!initialised) return UNINITIALIZED;                                          \
  Device *d = (Device *)(handle);                                                  \
  if (d < devices || d >= devices + device_count) return INVALID_ARGUMENT;         \
  { int failed = check_fail(d->fails, d->nfails, function);                       \
    if (failed) return failed; }

#define GLOBAL(function)                                                          \
  { int failed = check_fail(global_fails, nglobal_fails, function);               \
    if (failed) return failed; }

int nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  if (!loaded) load_config();
  GLOBAL("nvmlInitWithFlags");
  initialised++;
  return OK;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) {
  if (!initialised) return UNINITIALIZED;
  initialised--;
  return OK;
}

const char *nvmlErrorString(int result) {
  switch (result) {
    case 0: return "Success";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 15: return "GPU is lost";
    default: return "Stand-in error";
  }
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
  if (!initialised) return UNINITIALIZED;
  GLOBAL("nvmlSystemGetDriverVersion");
  snprintf(version, length, "%s", "999.99-standin");
  return OK;
}
int nvmlSystemGetCudaDriverVersion(int *version) {
  if (!initialised) return UNINITIALIZED;
  GLOBAL("nvmlSystemGetCudaDriverVersion");
  *version = 12040;
  return OK;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
  if (!initialised) return UNINITIALIZED;
  GLOBAL("nvmlDeviceGetCount_v2");
  *count = (unsigned)device_count;
  return OK;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, Device **handle) {
  if (!initialised) return UNINITIALIZED;
  if (index >= (unsigned)device_count) return INVALID_ARGUMENT;
  int failed = check_fail(devices[index].fails, devices[index].nfails,
                          "nvmlDeviceGetHandleByIndex_v2");
  if (failed) return failed;
  *handle = &devices[index];
  return OK;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, Device **handle) {
  if (!initialised) return UNINITIALIZED;
  for (int i = 0; i < device_count; i++) {
    if (strcasecmp(devices[i].bus_id, bus_id) == 0) { *handle = &devices[i]; return OK; }
  }
  return 6; /* NOT_FOUND */
}
int nvmlDeviceGetName(Device *handle, char *name, unsigned int length) {
  DEVICE(handle, "nvmlDeviceGetName");
  snprintf(name, length, "%s", d->name);
  return OK;
}
int nvmlDeviceGetUUID(Device *handle, char *uuid, unsigned int length) {
  DEVICE(handle, "nvmlDeviceGetUUID");
  snprintf(uuid, length, "%s", d->uuid);
  return OK;
}
int nvmlDeviceGetPciInfo_v3(Device *handle, PciInfo *pci) {
  DEVICE(handle, "nvmlDeviceGetPciInfo_v3");
  memset(pci, 0, sizeof *pci);
  snprintf(pci->busId, sizeof pci->busId, "%s", d->bus_id);
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", d->bus_id + 4);
  unsigned int domain = 0, bus = 0, device = 0;
  sscanf(d->bus_id, "%x:%x:%x", &domain, &bus, &device);
  pci->domain = domain; pci->bus = bus; pci->device = device;
  return OK;
}
int nvmlDeviceGetMemoryInfo(Device *handle, Memory *memory) {
  DEVICE(handle, "nvmlDeviceGetMemoryInfo");
  memory->total = d->memory_total;
  memory->used = d->memory_used;  /* v1: includes driver-reserved memory */
  memory->free = d->memory_total - d->memory_used;
  return OK;
}
#ifndef KB_NO_MEMORY_V2
int nvmlDeviceGetMemoryInfo_v2(Device *handle, MemoryV2 *memory) {
  DEVICE(handle, "nvmlDeviceGetMemoryInfo_v2");
  if (memory->version != 0x02000028) return 25; /* ARGUMENT_VERSION_MISMATCH */
  memory->total = d->memory_total;
  memory->reserved = d->memory_reserved;
  memory->used = d->memory_used - d->memory_reserved;
  memory->free = d->memory_total - d->memory_used;
  return OK;
}
#endif
int nvmlDeviceGetUtilizationRates(Device *handle, Utilization *rates) {
  DEVICE(handle, "nvmlDeviceGetUtilizationRates");
  rates->gpu = d->gpu_util;
  rates->memory = d->mem_util;
  return OK;
}
int nvmlDeviceGetPowerUsage(Device *handle, unsigned int *milliwatts) {
  DEVICE(handle, "nvmlDeviceGetPowerUsage");
  if (d->power_mw < 0) return NOT_SUPPORTED;
  *milliwatts = (unsigned)d->power_mw;
  return OK;
}
int nvmlDeviceGetTotalEnergyConsumption(Device *handle, unsigned long long *millijoules) {
  DEVICE(handle, "nvmlDeviceGetTotalEnergyConsumption");
  if (d->energy_mj < 0) return NOT_SUPPORTED;
  d->energy_mj += d->energy_step_mj;
  *millijoules = (unsigned long long)d->energy_mj;
  return OK;
}
int nvmlDeviceGetClockInfo(Device *handle, int type, unsigned int *clock) {
  DEVICE(handle, "nvmlDeviceGetClockInfo");
  (void)type;
  *clock = d->sm_clock;
  return OK;
}
int nvmlDeviceGetTemperature(Device *handle, int sensor, unsigned int *temperature) {
  DEVICE(handle, "nvmlDeviceGetTemperature");
  (void)sensor;
  *temperature = d->temperature;
  return OK;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(Device *handle, unsigned long long *reasons) {
  DEVICE(handle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  *reasons = d->reasons;
  return OK;
}
#ifndef KB_NO_EVENT_REASONS
int nvmlDeviceGetCurrentClocksEventReasons(Device *handle, unsigned long long *reasons) {
  DEVICE(handle, "nvmlDeviceGetCurrentClocksEventReasons");
  *reasons = d->reasons;
  return OK;
}
#endif

/* Every descendant of this process, from /proc (for "children" entries). */
static int descendants(long long *out, int max) {
  int n = 0;
  long long parents[256];
  int nparents = 1;
  parents[0] = getpid();
  for (int round = 0; round < 8 && nparents; round++) {
    long long next[256];
    int nnext = 0;
    DIR *proc = opendir("/proc");
    if (!proc) return n;
    struct dirent *entry;
    while ((entry = readdir(proc))) {
      if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
      char path[300], buffer[1024];
      snprintf(path, sizeof path, "/proc/%s/stat", entry->d_name);
      FILE *f = fopen(path, "r");
      if (!f) continue;
      size_t got = fread(buffer, 1, sizeof buffer - 1, f);
      fclose(f);
      buffer[got] = 0;
      char *close = strrchr(buffer, ')');
      if (!close) continue;
      char state;
      long long ppid;
      if (sscanf(close + 2, "%c %lld", &state, &ppid) != 2) continue;
      for (int p = 0; p < nparents; p++) {
        if (ppid == parents[p] && n < max && nnext < 256) {
          out[n++] = atoll(entry->d_name);
          next[nnext++] = atoll(entry->d_name);
        }
      }
    }
    closedir(proc);
    memcpy(parents, next, sizeof(long long) * nnext);
    nparents = nnext;
  }
  return n;
}

static int running_processes(Device *d, unsigned int *count, ProcessInfo *infos) {
  ProcessInfo all[MAX_PROCS * 4];
  int n = 0;
  for (int i = 0; i < d->nprocs; i++) {
    if (d->proc_pid[i] >= 0) {
      all[n].pid = (unsigned)d->proc_pid[i];
      all[n++].usedGpuMemory = d->proc_bytes[i];
      continue;
    }
    long long pids[MAX_PROCS * 2];
    int found = descendants(pids, MAX_PROCS * 2);
    for (int j = 0; j < found && n < MAX_PROCS * 4; j++) {
      all[n].pid = (unsigned)pids[j];
      all[n++].usedGpuMemory = d->proc_bytes[i];
    }
  }
  if (n == 0) { *count = 0; return OK; }
  if (infos == NULL || *count < (unsigned)n) { *count = (unsigned)n; return INSUFFICIENT_SIZE; }
  for (int i = 0; i < n; i++) {
    infos[i] = all[i];
    infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFF;
  }
  *count = (unsigned)n;
  return OK;
}
#ifndef KB_NO_PROCESSES_V3
int nvmlDeviceGetComputeRunningProcesses_v3(Device *handle, unsigned int *count,
                                            ProcessInfo *infos) {
  DEVICE(handle, "nvmlDeviceGetComputeRunningProcesses_v3");
  return running_processes(d, count, infos);
}
#endif
int nvmlDeviceGetComputeRunningProcesses_v2(Device *handle, unsigned int *count,
                                            ProcessInfo *infos) {
  DEVICE(handle, "nvmlDeviceGetComputeRunningProcesses_v2");
  return running_processes(d, count, infos);
}
