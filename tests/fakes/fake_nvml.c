/*
 * Test stand-in for libnvidia-ml.so.1: exports the NVML symbols that
 * gpuops.fleet calls through unmodified nvidia-ml-py (pynvml), with the real
 * ABI (nvmlPciInfo_t is 68 bytes, nvmlMemory_t is 3 x unsigned long long).
 *
 * The fake node is described by the file named in GPUOPS_FAKE_NVML_CONFIG,
 * one record a line, fields separated by '|':
 *   driver|535.104.05
 *   cuda|12020
 *   init_error|9                      (nvmlInitWithFlags returns this code)
 *   uuid_error|<gpu index>|<code>     (nvmlDeviceGetUUID fails for that GPU)
 *   gpu|<uuid>|<name>|<bus id>|<memory MiB>|<minor>|<mig current>|<mig pending>   (mig -1: not supported)
 *   mig|<gpu index>|<slot>|<uuid>|<profile>|<gi>|<ci>|<memory MiB>
 *   proc|<gpu index>|<pid>|<used MiB>  (a compute process: nvmlDeviceGetComputeRunningProcesses_v3
 *                                        and _v2, and the GPU's used memory in nvmlDeviceGetMemoryInfo)
 * Build: gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fake_nvml.c
 * Older drivers, by the symbols their library lacks (tests/fakes/fakenode.py DRIVERS):
 *   -DFAKE_NVML_NO_PROCS_V3   no nvmlDeviceGetComputeRunningProcesses_v3 (drivers before 510)
 *   -DFAKE_NVML_NO_PROCS_V2   no nvmlDeviceGetComputeRunningProcesses_v2 (440 and older, with the above)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_GPUS 16
#define MAX_MIGS 8

typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
/* nvmlProcessInfo_t (v2 = v3 layout in nvml.h): 24 bytes with padding, as pynvml's c_nvmlProcessInfo_v3_t */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;

typedef struct dev {
    int is_mig, index, minor, mig_cur, mig_pend, gi, ci, uuid_error, present;
    unsigned long long mem_mib;
    char uuid[96], name[96], bus[32];
    struct dev *parent;
    struct dev *migs[MAX_MIGS];
} dev_t_;

#define MAX_PROCS 256
static struct { int gpu; unsigned pid; unsigned long long used_mib; } procs[MAX_PROCS];
static int nprocs;
static dev_t_ gpus[MAX_GPUS];
static dev_t_ migs[MAX_GPUS * MAX_MIGS];
static int ngpus, nmigs, init_error, cuda = 12020, initialized;
static char driver[80] = "535.104.05";

static char *field(char **s) {
    char *start = *s, *bar;
    if (!start) return "";
    bar = strchr(start, '|');
    if (bar) { *bar = 0; *s = bar + 1; } else { *s = NULL; }
    return start;
}

static void load(void) {
    const char *path = getenv("GPUOPS_FAKE_NVML_CONFIG");
    char line[512];
    FILE *f;
    ngpus = nmigs = init_error = nprocs = 0;
    memset(gpus, 0, sizeof gpus);
    memset(migs, 0, sizeof migs);
    if (!path || !(f = fopen(path, "r"))) { init_error = 9; return; }
    while (fgets(line, sizeof line, f)) {
        char *s = line, *kind;
        line[strcspn(line, "\r\n")] = 0;
        kind = field(&s);
        if (!strcmp(kind, "driver")) snprintf(driver, sizeof driver, "%s", field(&s));
        else if (!strcmp(kind, "cuda")) cuda = atoi(field(&s));
        else if (!strcmp(kind, "init_error")) init_error = atoi(field(&s));
        else if (!strcmp(kind, "uuid_error")) { int i = atoi(field(&s)); if (i >= 0 && i < MAX_GPUS) gpus[i].uuid_error = atoi(field(&s)); }
        else if (!strcmp(kind, "gpu") && ngpus < MAX_GPUS) {
            dev_t_ *g = &gpus[ngpus];
            g->index = ngpus++;
            g->present = 1;
            snprintf(g->uuid, sizeof g->uuid, "%s", field(&s));
            snprintf(g->name, sizeof g->name, "%s", field(&s));
            snprintf(g->bus, sizeof g->bus, "%s", field(&s));
            g->mem_mib = strtoull(field(&s), NULL, 10);
            g->minor = atoi(field(&s));
            g->mig_cur = atoi(field(&s));
            g->mig_pend = atoi(field(&s));
        } else if (!strcmp(kind, "proc") && nprocs < MAX_PROCS) {
            procs[nprocs].gpu = atoi(field(&s));
            procs[nprocs].pid = (unsigned)strtoul(field(&s), NULL, 10);
            procs[nprocs].used_mib = strtoull(field(&s), NULL, 10);
            nprocs++;
        } else if (!strcmp(kind, "mig") && nmigs < MAX_GPUS * MAX_MIGS) {
            int gi = atoi(field(&s)), slot = atoi(field(&s));
            dev_t_ *m = &migs[nmigs++];
            char profile[32];
            if (gi < 0 || gi >= MAX_GPUS || slot < 0 || slot >= MAX_MIGS) continue;
            m->is_mig = 1; m->index = slot; m->parent = &gpus[gi]; m->present = 1;
            snprintf(m->uuid, sizeof m->uuid, "%s", field(&s));
            snprintf(profile, sizeof profile, "%s", field(&s));
            snprintf(m->name, sizeof m->name, "%s MIG %s", gpus[gi].name, profile);
            m->gi = atoi(field(&s));
            m->ci = atoi(field(&s));
            m->mem_mib = strtoull(field(&s), NULL, 10);
            gpus[gi].migs[slot] = m;
        }
    }
    fclose(f);
}

#define CHECK_INIT() do { if (!initialized) return 1; } while (0)
#define CHECK_DEV(d) do { if (!(d) || !(d)->present) return 2; } while (0)

/* GPUOPS_FAKE_NVML_OPEN=<device node>: open it first, as the real library opens /dev/nvidiactl. A device cgroup
 * that does not allow it (EPERM) fails the init with NVML_ERROR_UNKNOWN, what driver 580's library returned in
 * such a container on an H200 (hack/real-gpu/node_pod_devices.py); any other outcome (ENXIO: no driver behind
 * the node) passes, so the rest stays simulated. */
static int open_device(void) {
    const char *dev = getenv("GPUOPS_FAKE_NVML_OPEN");
    int fd;
    if (!dev || !*dev) return 0;
    fd = open(dev, O_RDWR | O_CLOEXEC);
    if (fd >= 0) { close(fd); return 0; }
    return errno == EPERM ? 999 : 0;
}
int nvmlInitWithFlags(unsigned flags) {
    int rc;
    (void)flags;
    load();
    if ((rc = open_device())) return rc;
    if (init_error) return init_error;
    initialized = 1;
    return 0;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { CHECK_INIT(); initialized = 0; return 0; }

const char *nvmlErrorString(int r) {
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

static int copy_str(char *dst, unsigned len, const char *src) {
    if (strlen(src) + 1 > len) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(dst, src);
    return 0;
}

int nvmlSystemGetDriverVersion(char *v, unsigned len) { CHECK_INIT(); return copy_str(v, len, driver); }
int nvmlSystemGetCudaDriverVersion(int *v) { CHECK_INIT(); *v = cuda; return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { CHECK_INIT(); *n = (unsigned)ngpus; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev_t_ **h) { CHECK_INIT(); if (i >= (unsigned)ngpus) return 2; *h = &gpus[i]; return 0; }
int nvmlDeviceGetUUID(dev_t_ *d, char *v, unsigned len) { CHECK_INIT(); CHECK_DEV(d); if (d->uuid_error) return d->uuid_error; return copy_str(v, len, d->uuid); }
int nvmlDeviceGetName(dev_t_ *d, char *v, unsigned len) { CHECK_INIT(); CHECK_DEV(d); return copy_str(v, len, d->name); }
int nvmlDeviceGetMinorNumber(dev_t_ *d, unsigned *v) { CHECK_INIT(); CHECK_DEV(d); if (d->is_mig) return 3; *v = (unsigned)d->minor; return 0; }

int nvmlDeviceGetPciInfo_v3(dev_t_ *d, nvmlPciInfo_t *p) {
    unsigned dom = 0, bus = 0, devno = 0, fn = 0;
    CHECK_INIT(); CHECK_DEV(d);
    if (d->is_mig) d = d->parent;
    memset(p, 0, sizeof *p);
    sscanf(d->bus, "%x:%x:%x.%x", &dom, &bus, &devno, &fn);
    p->domain = dom; p->bus = bus; p->device = devno; p->pciDeviceId = 0x20b010de;
    snprintf(p->busId, sizeof p->busId, "%s", d->bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04x:%02x:%02x.%x", dom, bus, devno, fn);
    return 0;
}

static unsigned long long used_mib(const dev_t_ *d) {
    unsigned long long used = 0; int i;
    if (d->is_mig) return 0;
    for (i = 0; i < nprocs; i++) if (procs[i].gpu == d->index) used += procs[i].used_mib;
    return used;
}

int nvmlDeviceGetMemoryInfo(dev_t_ *d, nvmlMemory_t *m) {
    CHECK_INIT(); CHECK_DEV(d);
    m->total = d->mem_mib * 1024ULL * 1024ULL; m->used = used_mib(d) * 1024ULL * 1024ULL; m->free = m->total - m->used;
    return 0;
}

/* As NVML: with *count too small (pynvml first passes 0 and NULL) it sets *count and returns
 * NVML_ERROR_INSUFFICIENT_SIZE (7); no process is success with *count 0. MIG instances: not supported (3). */
__attribute__((unused)) static int compute_procs(dev_t_ *d, unsigned *count, nvmlProcessInfo_t *infos) {
    unsigned n = 0, k = 0; int i;
    CHECK_INIT(); CHECK_DEV(d);
    if (!count) return 2;
    if (d->is_mig) return 3;
    for (i = 0; i < nprocs; i++) if (procs[i].gpu == d->index) n++;
    if (n == 0) { *count = 0; return 0; }
    if (!infos || *count < n) { *count = n; return 7; }
    for (i = 0; i < nprocs; i++) {
        if (procs[i].gpu != d->index) continue;
        infos[k].pid = procs[i].pid;
        infos[k].usedGpuMemory = procs[i].used_mib * 1024ULL * 1024ULL;
        infos[k].gpuInstanceId = infos[k].computeInstanceId = 0xFFFFFFFFu;
        k++;
    }
    *count = n;
    return 0;
}

#ifndef FAKE_NVML_NO_PROCS_V3
int nvmlDeviceGetComputeRunningProcesses_v3(dev_t_ *d, unsigned *count, nvmlProcessInfo_t *infos) { return compute_procs(d, count, infos); }
#endif
#ifndef FAKE_NVML_NO_PROCS_V2
/* same layout: pynvml's c_nvmlProcessInfo_v2_t */
int nvmlDeviceGetComputeRunningProcesses_v2(dev_t_ *d, unsigned *count, nvmlProcessInfo_t *infos) { return compute_procs(d, count, infos); }
#endif

int nvmlDeviceGetMigMode(dev_t_ *d, unsigned *cur, unsigned *pend) {
    CHECK_INIT(); CHECK_DEV(d);
    if (d->is_mig || d->mig_cur < 0) return 3;
    *cur = (unsigned)d->mig_cur; *pend = (unsigned)d->mig_pend;
    return 0;
}

int nvmlDeviceGetMaxMigDeviceCount(dev_t_ *d, unsigned *n) { CHECK_INIT(); CHECK_DEV(d); if (d->is_mig || d->mig_cur < 0) return 3; *n = 7; return 0; }

int nvmlDeviceGetMigDeviceHandleByIndex(dev_t_ *d, unsigned i, dev_t_ **h) {
    CHECK_INIT(); CHECK_DEV(d);
    if (d->is_mig) return 2;
    if (i >= MAX_MIGS || !d->migs[i]) return 6;
    *h = d->migs[i];
    return 0;
}

int nvmlDeviceGetGpuInstanceId(dev_t_ *d, unsigned *v) { CHECK_INIT(); CHECK_DEV(d); if (!d->is_mig) return 2; *v = (unsigned)d->gi; return 0; }
int nvmlDeviceGetComputeInstanceId(dev_t_ *d, unsigned *v) { CHECK_INIT(); CHECK_DEV(d); if (!d->is_mig) return 2; *v = (unsigned)d->ci; return 0; }
