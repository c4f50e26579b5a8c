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
 * Health (read by gpu_health_info; <gpu> is the GPU's index):
 *   recovery|<gpu>|<0..7>             field 230, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
 *   remap|<gpu>|<corr>|<unc>|<pending>|<failure>   fields 142-145 (NOT_SUPPORTED with MIG instances, or before Ampere)
 *   retired|<gpu>|<sbe>|<dbe>|<pending>            fields 29-31 (NOT_SUPPORTED from Hopper on, as on a real H200)
 *   ecc|<gpu>|<vol_sbe>|<vol_dbe>|<agg_sbe>|<agg_dbe>   fields 3-6
 *   persistence|<gpu>|<0|1>           nvmlDeviceGetPersistenceMode (default 1)
 *   temp|<gpu>|<cur>|<slowdown>|<shutdown>        nvmlDeviceGetTemperature / ...Threshold
 *   clocks|<gpu>|<mask>               nvmlDeviceGetCurrentClocksEventReasons (a decimal or 0x mask)
 *   nvlink|<gpu>|<link>|<active>|<peer gpu>|<replay>|<recovery>|<crc>   (no line: NOT_SUPPORTED, as a PCIe GPU)
 *   arch|<gpu>|<nvml arch>            nvmlDeviceGetArchitecture (default 7, Ampere)
 *   lost|<gpu>                        nvmlDeviceGetHandleByIndex returns 15 (GPU is lost), as for a GPU off the bus
 *   reset_required|<gpu>              every query but UUID, name, PCI info and minor returns 16 (reset required)
 *   board|<gpu>|<serial>|<part number>   nvmlDeviceGetSerial, nvmlDeviceGetBoardPartNumber (no line: NOT_SUPPORTED, as
 *                                     on a GeForce board, which has no serial in its InfoROM)
 * Events (the device plugin's health loop: nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait_v2):
 *   xid|<gpu>|<xid>                   an XID critical error event (nvmlEventTypeXidCriticalError). The file is read
 *                                     again at each wait; an event set delivers only the xid lines appended after it was
 *                                     created, as the real library delivers only events that happen after registration,
 *                                     and only for the GPUs registered in it, in file order.
 * Clients: a successful init creates <config>.clients/<pid>, nvmlShutdown removes it (the fake nvidia-smi's reset
 * is refused while a live process holds NVML, as a real client blocks a real reset).
 * Build: gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fake_nvml.c
 * Older drivers, by the symbols their library lacks (tests/fakes/fakenode.py DRIVERS):
 *   -DFAKE_NVML_NO_PROCS_V3   no nvmlDeviceGetComputeRunningProcesses_v3 (drivers before 510)
 *   -DFAKE_NVML_NO_PROCS_V2   no nvmlDeviceGetComputeRunningProcesses_v2 (440 and older, with the above)
 *   -DFAKE_NVML_NO_FIELD_RECOVERY  field 230 answers NOT_SUPPORTED in its own nvmlReturn (drivers before the field)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_GPUS 16
#define MAX_MIGS 8
#define MAX_LINKS 18

typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
/* nvmlProcessInfo_t (v2 = v3 layout in nvml.h): 24 bytes with padding, as pynvml's c_nvmlProcessInfo_v3_t */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;

typedef struct { int set, active, peer; unsigned long long replay, recovery, crc; } link_t;
typedef struct {
    int recovery, lost, reset_required, persistence, arch, temp, slowdown, shutdown, ecc_mode;
    unsigned long long clocks, remap[4], retired[3], ecc[4];
    link_t links[MAX_LINKS];
    int board;
    char serial[32], part[32];
} health_t;

typedef struct dev {
    int is_mig, index, minor, mig_cur, mig_pend, gi, ci, uuid_error, present;
    health_t h;
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
static health_t pending_health[MAX_GPUS]; /* health lines may come before their gpu line */
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
    memset(pending_health, 0, sizeof pending_health);
    for (int i = 0; i < MAX_GPUS; i++) {
        health_t *h = &pending_health[i];
        h->persistence = 1; h->arch = 7; h->temp = 40; h->slowdown = 87; h->shutdown = 92; h->ecc_mode = 1;
    }
    if (!path || !(f = fopen(path, "r"))) { init_error = 9; return; }
    while (fgets(line, sizeof line, f)) {
        char *s = line, *kind;
        line[strcspn(line, "\r\n")] = 0;
        kind = field(&s);
        if (!strcmp(kind, "driver")) snprintf(driver, sizeof driver, "%s", field(&s));
        else if (!strcmp(kind, "cuda")) cuda = atoi(field(&s));
        else if (!strcmp(kind, "init_error")) init_error = atoi(field(&s));
        else if (!strcmp(kind, "uuid_error")) { int i = atoi(field(&s)); if (i >= 0 && i < MAX_GPUS) gpus[i].uuid_error = atoi(field(&s)); }
        else if (!strcmp(kind, "recovery") || !strcmp(kind, "remap") || !strcmp(kind, "retired") || !strcmp(kind, "ecc")
                 || !strcmp(kind, "persistence") || !strcmp(kind, "temp") || !strcmp(kind, "clocks") || !strcmp(kind, "nvlink")
                 || !strcmp(kind, "arch") || !strcmp(kind, "lost") || !strcmp(kind, "reset_required") || !strcmp(kind, "board")) {
            int i = atoi(field(&s)), k;
            health_t *h;
            if (i < 0 || i >= MAX_GPUS) continue;
            h = &pending_health[i];
            if (!strcmp(kind, "recovery")) h->recovery = atoi(field(&s));
            else if (!strcmp(kind, "remap")) for (k = 0; k < 4; k++) h->remap[k] = strtoull(field(&s), NULL, 10);
            else if (!strcmp(kind, "retired")) for (k = 0; k < 3; k++) h->retired[k] = strtoull(field(&s), NULL, 10);
            else if (!strcmp(kind, "ecc")) for (k = 0; k < 4; k++) h->ecc[k] = strtoull(field(&s), NULL, 10);
            else if (!strcmp(kind, "persistence")) h->persistence = atoi(field(&s));
            else if (!strcmp(kind, "temp")) { h->temp = atoi(field(&s)); h->slowdown = atoi(field(&s)); h->shutdown = atoi(field(&s)); }
            else if (!strcmp(kind, "clocks")) h->clocks = strtoull(field(&s), NULL, 0);
            else if (!strcmp(kind, "arch")) h->arch = atoi(field(&s));
            else if (!strcmp(kind, "lost")) h->lost = 1;
            else if (!strcmp(kind, "reset_required")) h->reset_required = 1;
            else if (!strcmp(kind, "board")) {
                h->board = 1;
                snprintf(h->serial, sizeof h->serial, "%s", field(&s));
                snprintf(h->part, sizeof h->part, "%s", field(&s));
            }
            else {
                int link = atoi(field(&s));
                link_t *l;
                if (link < 0 || link >= MAX_LINKS) continue;
                l = &h->links[link];
                l->set = 1;
                l->active = atoi(field(&s));
                l->peer = atoi(field(&s));
                l->replay = strtoull(field(&s), NULL, 10);
                l->recovery = strtoull(field(&s), NULL, 10);
                l->crc = strtoull(field(&s), NULL, 10);
            }
        }
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
    for (int i = 0; i < ngpus; i++) gpus[i].h = pending_health[i];
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
/* A client holds NVML from init to shutdown: <config>.clients/<pid> says so to the fake nvidia-smi, whose reset is
 * refused while a live client holds it, as the real driver refuses ("In use by another client"). */
static void client_path(char *buf, size_t len) {
    const char *path = getenv("GPUOPS_FAKE_NVML_CONFIG");
    snprintf(buf, len, "%s.clients/%d", path ? path : "", (int)getpid());
}
static void client_register(int on) {
    char path[4096];
    const char *config = getenv("GPUOPS_FAKE_NVML_CONFIG");
    if (!config) return;
    client_path(path, sizeof path);
    if (on) {
        char dir[4096];
        int fd;
        snprintf(dir, sizeof dir, "%s.clients", config);
        mkdir(dir, 0755);
        if ((fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) >= 0) close(fd);
    } else {
        unlink(path);
    }
}
int nvmlInitWithFlags(unsigned flags) {
    int rc;
    (void)flags;
    load();
    if ((rc = open_device())) return rc;
    if (init_error) return init_error;
    initialized = 1;
    client_register(1);
    return 0;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { CHECK_INIT(); initialized = 0; client_register(0); return 0; }

const char *nvmlErrorString(int r) {
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 15: return "GPU is lost";
    case 16: return "Reset Required";
    case 19: return "In use by another client";
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
int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev_t_ **h) {
    CHECK_INIT();
    if (i >= (unsigned)ngpus) return 2;
    if (gpus[i].h.lost) return 15;
    *h = &gpus[i];
    return 0;
}
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

#define CHECK_RESET(d) do { if ((d)->h.reset_required) return 16; } while (0)

int nvmlDeviceGetMemoryInfo(dev_t_ *d, nvmlMemory_t *m) {
    CHECK_INIT(); CHECK_DEV(d); CHECK_RESET(d);
    m->total = d->mem_mib * 1024ULL * 1024ULL; m->used = used_mib(d) * 1024ULL * 1024ULL; m->free = m->total - m->used;
    return 0;
}

/* As NVML: with *count too small (pynvml first passes 0 and NULL) it sets *count and returns
 * NVML_ERROR_INSUFFICIENT_SIZE (7); no process is success with *count 0. MIG instances: not supported (3). */
__attribute__((unused)) static int compute_procs(dev_t_ *d, unsigned *count, nvmlProcessInfo_t *infos) {
    unsigned n = 0, k = 0; int i;
    CHECK_INIT(); CHECK_DEV(d);
    if (!d->is_mig) CHECK_RESET(d);
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

/* ---- health ---- */
/* nvmlFieldValue_t as pynvml's c_nvmlFieldValue_t: 40 bytes */
typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned valueType, nvmlReturn;
    union { double d; unsigned ui; unsigned long ul; unsigned long long ull; long long sll; int si; unsigned short us; } value;
} nvmlFieldValue_t;

static int has_mig_instances(const dev_t_ *d) {
    int i;
    if (d->mig_cur != 1) return 0;
    for (i = 0; i < MAX_MIGS; i++) if (d->migs[i]) return 1;
    return 0;
}

static void field_value(const dev_t_ *d, nvmlFieldValue_t *v) {
    const health_t *h = &d->h;
    unsigned long long ull = 0;
    int rc = 0;
    v->valueType = 3; /* unsigned long long */
    switch (v->fieldId) {
    case 3: case 4: case 5: case 6:
        if (!h->ecc_mode) rc = 3; else ull = h->ecc[v->fieldId - 3];
        break;
    case 29: case 30: case 31:
        if (h->arch >= 9) rc = 3; else ull = h->retired[v->fieldId - 29];
        break;
    case 142: case 143: case 144: case 145:
        if (h->arch < 7 || has_mig_instances(d)) rc = 3; else ull = h->remap[v->fieldId - 142];
        break;
    case 230:
        v->valueType = 1;
#ifdef FAKE_NVML_NO_FIELD_RECOVERY
        rc = 3;
#else
        v->value.ui = (unsigned)h->recovery;
#endif
        v->nvmlReturn = (unsigned)rc;
        return;
    default:
        rc = 3;
    }
    v->nvmlReturn = (unsigned)rc;
    if (!rc) v->value.ull = ull;
}

int nvmlDeviceGetFieldValues(dev_t_ *d, int count, nvmlFieldValue_t *values) {
    int i;
    CHECK_INIT(); CHECK_DEV(d);
    if (count < 0 || !values) return 2;
    for (i = 0; i < count; i++) {
        values[i].timestamp = 0; values[i].latencyUsec = 0;
        if (d->is_mig) { values[i].nvmlReturn = 3; continue; }
        if (d->h.reset_required) { values[i].nvmlReturn = 16; continue; }
        field_value(d, &values[i]);
    }
    return 0;
}

#define WHOLE_GPU(d) do { CHECK_INIT(); CHECK_DEV(d); if ((d)->is_mig) return 3; CHECK_RESET(d); } while (0)

int nvmlDeviceGetPersistenceMode(dev_t_ *d, unsigned *v) { WHOLE_GPU(d); *v = (unsigned)d->h.persistence; return 0; }
int nvmlDeviceGetArchitecture(dev_t_ *d, unsigned *v) { WHOLE_GPU(d); *v = (unsigned)d->h.arch; return 0; }
int nvmlDeviceGetEccMode(dev_t_ *d, unsigned *cur, unsigned *pend) { WHOLE_GPU(d); *cur = *pend = (unsigned)d->h.ecc_mode; return 0; }
int nvmlDeviceGetTemperature(dev_t_ *d, int sensor, unsigned *v) { WHOLE_GPU(d); if (sensor != 0) return 2; *v = (unsigned)d->h.temp; return 0; }
int nvmlDeviceGetTemperatureThreshold(dev_t_ *d, int which, unsigned *v) {
    WHOLE_GPU(d);
    if (which == 0) *v = (unsigned)d->h.shutdown; else if (which == 1) *v = (unsigned)d->h.slowdown; else return 3;
    return 0;
}
int nvmlDeviceGetCurrentClocksEventReasons(dev_t_ *d, unsigned long long *v) { WHOLE_GPU(d); *v = d->h.clocks; return 0; }
/* NVML_DEVICE_SERIAL_BUFFER_SIZE 30, NVML_DEVICE_PART_NUMBER_BUFFER_SIZE 80 (nvml.h): the InfoROM's, readable on a GPU
 * that needs a reset too (nvidia-smi -q prints them then) */
int nvmlDeviceGetSerial(dev_t_ *d, char *v, unsigned len) { CHECK_INIT(); CHECK_DEV(d); if (d->is_mig) return 3; if (!d->h.board) return 3; return copy_str(v, len, d->h.serial); }
int nvmlDeviceGetBoardPartNumber(dev_t_ *d, char *v, unsigned len) { CHECK_INIT(); CHECK_DEV(d); if (d->is_mig) return 3; if (!d->h.board) return 3; return copy_str(v, len, d->h.part); }

static int any_link(const dev_t_ *d) {
    int i;
    for (i = 0; i < MAX_LINKS; i++) if (d->h.links[i].set) return 1;
    return 0;
}
#define LINK(d, link) do { WHOLE_GPU(d); if (!any_link(d)) return 3; if ((link) >= MAX_LINKS || !(d)->h.links[link].set) return 2; } while (0)

/* --- XID events --------------------------------------------------------------------------------------- */
#define EVENT_XID 0x8ULL  /* nvmlEventTypeXidCriticalError */
#define EVENT_DBE 0x2ULL  /* nvmlEventTypeDoubleBitEccError */
#define EVENT_SBE 0x1ULL  /* nvmlEventTypeSingleBitEccError */
typedef struct { dev_t_ *device; unsigned long long eventType, eventData; unsigned gpuInstanceId, computeInstanceId; } nvmlEventData_t;
typedef struct { unsigned long long mask[MAX_GPUS]; long seen; } event_set_t;

/* the xid lines of the config, in order: at most `max` of them into gpu[]/xid[]; returns how many there are */
static long read_xids(int *gpu, unsigned long long *xid, long max) {
    const char *path = getenv("GPUOPS_FAKE_NVML_CONFIG");
    char line[512];
    long n = 0;
    FILE *f;
    if (!path || !(f = fopen(path, "r"))) return 0;
    while (fgets(line, sizeof line, f)) {
        char *s = line;
        line[strcspn(line, "\r\n")] = 0;
        if (strcmp(field(&s), "xid")) continue;
        if (n < max) { gpu[n] = atoi(field(&s)); xid[n] = strtoull(field(&s), NULL, 10); }
        n++;
    }
    fclose(f);
    return n;
}
int nvmlEventSetCreate(event_set_t **set) {
    CHECK_INIT();
    if (!set || !(*set = calloc(1, sizeof **set))) return 2;
    (*set)->seen = read_xids(NULL, NULL, 0);
    return 0;
}
int nvmlDeviceGetSupportedEventTypes(dev_t_ *d, unsigned long long *types) {
    WHOLE_GPU(d);
    *types = EVENT_XID | EVENT_DBE | EVENT_SBE;
    return 0;
}
int nvmlDeviceRegisterEvents(dev_t_ *d, unsigned long long types, event_set_t *set) {
    WHOLE_GPU(d);
    if (!set || (types & ~(EVENT_XID | EVENT_DBE | EVENT_SBE))) return 2;
    set->mask[d->index] |= types;
    return 0;
}
int nvmlEventSetWait_v2(event_set_t *set, nvmlEventData_t *data, unsigned timeoutms) {
    enum { MAX_EVENTS = 1024 };
    static int gpu[MAX_EVENTS];
    static unsigned long long xid[MAX_EVENTS];
    unsigned waited = 0;
    CHECK_INIT();
    if (!set || !data) return 2;
    for (;;) {
        long n = read_xids(gpu, xid, MAX_EVENTS);
        while (set->seen < n && set->seen < MAX_EVENTS) {
            long i = set->seen++;
            if (gpu[i] < 0 || gpu[i] >= ngpus || !(set->mask[gpu[i]] & EVENT_XID)) continue;
            memset(data, 0, sizeof *data);
            data->device = &gpus[gpu[i]];
            data->eventType = EVENT_XID;
            data->eventData = xid[i];
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
            return 0;
        }
        if (waited >= timeoutms) return 10; /* NVML_ERROR_TIMEOUT */
        usleep(100 * 1000);
        waited += 100;
    }
}
int nvmlEventSetWait(event_set_t *set, nvmlEventData_t *data, unsigned timeoutms) { return nvmlEventSetWait_v2(set, data, timeoutms); }
int nvmlEventSetFree(event_set_t *set) { CHECK_INIT(); free(set); return 0; }

int nvmlDeviceGetNvLinkState(dev_t_ *d, unsigned link, unsigned *v) { LINK(d, link); *v = (unsigned)d->h.links[link].active; return 0; }
int nvmlDeviceGetNvLinkErrorCounter(dev_t_ *d, unsigned link, int counter, unsigned long long *v) {
    LINK(d, link);
    switch (counter) {
    case 0: *v = d->h.links[link].replay; return 0;
    case 1: *v = d->h.links[link].recovery; return 0;
    case 2: *v = d->h.links[link].crc; return 0;
    default: return 3;
    }
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(dev_t_ *d, unsigned link, nvmlPciInfo_t *p) {
    int peer;
    LINK(d, link);
    peer = d->h.links[link].peer;
    if (peer < 0 || peer >= ngpus) return 2;
    return nvmlDeviceGetPciInfo_v3(&gpus[peer], p);
}
