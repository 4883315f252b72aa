/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-info: what nccl-det would do in this environment.  Prints the version,
 * every NCCL_DET_* setting with its value and where it came from, which loading
 * mode is active (a preloaded nccl-det, what dlopen("libnccl.so.2") gives, the
 * plugin variables), the real NCCL nccl-det forwards to, and the GPUs with their
 * peer-access matrix and a CUDA IPC probe between two processes.  Run it the way the job runs (same
 * environment, same LD_PRELOAD / LD_LIBRARY_PATH, or under nccl-det-run) to see what the job gets.
 *
 * It never links libnccl or nccl-det: both are looked up at run time, so the tool
 * also works (and says so) where neither is installed.  The CUDA runtime is linked
 * statically; without a driver or GPU it prints "no GPU" and exits 0.
 */
#include "config.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "nccl_det.h"
#include "common/ndet_env.h"
#include "common/ndet_settings.h"

/* Every copy of nccl-det exports it; the real NCCL never does. */
#define INFO_MARKER   "ncclDetGetVersion"
#define INFO_PATH_MAX 4096

typedef ncclResult_t (*info_get_version_t)(int *version);
typedef ncclResult_t (*info_get_library_t)(const char **path, int *version, const char **found_by);

struct info_copy {
	char path[INFO_PATH_MAX];
	bool found;
};

static void info_usage(FILE *out)
{
	fprintf(out,
		"Usage: nccl-det-info [--help] [--version] [--no-gpu] [--all] [--check] [--get "
		"NAME]\n"
		"\n"
		"Prints what nccl-det does in this environment: its version; every NCCL_DET_*\n"
		"setting with its value and source (environment, $NCCL_CONF_FILE or\n"
		"~/.nccl.conf, /etc/nccl.conf, default); the loading mode in effect (preloaded\n"
		"libnccl-det.so, the drop-in libnccl.so.2, the plugin variables); the real NCCL\n"
		"nccl-det finds and its version; the GPUs, their peer-access (P2P) matrix, and\n"
		"whether a second process can open, read and write their memory through CUDA\n"
		"IPC, as the ranks of a job do (IPC matrix).\n"
		"Run it with the job's environment (or as `nccl-det-run nccl-det-info`).\n"
		"\n"
		"  --no-gpu    skip the GPU section and the driver (no CUDA call)\n"
		"  --all       also the test-only and internal settings\n"
		"  --check     exit status 0 when this environment would divert eligible calls\n"
		"              (nccl-det loaded, enabled), else 1 with the reason\n"
		"  --get NAME  print the value of setting NAME in effect, as the library\n"
		"              reads it (a bad value WARNs and gives the default), and exit;\n"
		"              exit status 2 when NAME is no setting\n"
		"  --version   print the version and exit\n"
		"  --help      print this help and exit\n");
}

/* The first loaded object (not this program) that exports INFO_MARKER. */
static int info_find_copy(struct dl_phdr_info *object, size_t size, void *opaque)
{
	struct info_copy *copy = opaque;
	if (object->dlpi_name == NULL || object->dlpi_name[0] == '\0')
		return 0;
	void *handle = dlopen(object->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
	if (handle == NULL) {
		(void)dlerror();
		return 0;
	}
	void *marker = dlsym(handle, INFO_MARKER);
	Dl_info where;
	bool own = marker != NULL && dladdr(marker, &where) != 0 &&
		   (uintptr_t)where.dli_fbase == (uintptr_t)object->dlpi_addr;
	if (dlclose(handle) != 0)
		(void)dlerror();
	if (!own)
		return 0;
	snprintf(copy->path, sizeof(copy->path), "%s", object->dlpi_name);
	copy->found = true;
	return 1;
}

static const char *info_env(const char *name)
{
	const char *value = ndet_env_get(name, NULL);
	return value != NULL && value[0] != '\0' ? value : NULL;
}

/*
 * The item of a plugin variable (a comma list in NCCL 2.27+) that names nccl-det's
 * plugin `file` ("det", or a path ending in it), copied into `item`; NULL if none.
 */
static const char *info_det_item(const char *value, const char *file, char *item, size_t size)
{
	if (value == NULL)
		return NULL;
	snprintf(item, size, "%s", value);
	char *saved = NULL;
	for (char *one = strtok_r(item, ",", &saved); one != NULL;
	     one = strtok_r(NULL, ",", &saved)) {
		const char *base = strrchr(one, '/');
		base = base != NULL ? base + 1 : one;
		if (strcmp(one, "det") == 0 || strcmp(base, file) == 0)
			return one;
	}
	return NULL;
}

static bool info_names_det(const char *value, const char *file)
{
	char item[INFO_PATH_MAX];
	return info_det_item(value, file, item, sizeof(item)) != NULL;
}

/* What a copy of nccl-det says about the real NCCL, printed later. */
struct info_nccl {
	bool asked;
	bool answered;
	const char *path;
	const char *found_by;
	int version;
	int copy_version;
};

static void info_ask_copy(void *handle, struct info_nccl *nccl)
{
	info_get_version_t get_version = (info_get_version_t)dlsym(handle, INFO_MARKER);
	info_get_library_t get_library = (info_get_library_t)dlsym(handle, "ncclDetGetNcclLibrary");
	(void)dlerror();
	nccl->asked = true;
	nccl->copy_version = 0;
	if (get_version != NULL && get_version(&nccl->copy_version) != ncclSuccess)
		nccl->copy_version = 0;
	nccl->answered = get_library != NULL &&
			 get_library(&nccl->path, &nccl->version, &nccl->found_by) == ncclSuccess;
}

static void info_print_version(const char *label, int version)
{
	if (version > 0)
		printf("  %s %d.%d.%d (%d)\n", label, version / 10000, (version % 10000) / 100,
		       version % 100, version);
	else
		printf("  %s unknown\n", label);
}

static void info_print_copy(const struct info_nccl *nccl, bool preload_build)
{
	if (nccl->copy_version > 0)
		printf("  nccl-det version ... %d.%d.%d%s\n", nccl->copy_version / 10000,
		       (nccl->copy_version % 10000) / 100, nccl->copy_version % 100,
		       nccl->copy_version == NCCL_DET_VERSION_CODE ? ""
								   : "  (NOT this tool's version)");
	if (!nccl->answered) {
		printf("  real NCCL .......... (this nccl-det cannot say: too old?)\n");
		return;
	}
	if (nccl->path[0] == '\0' && preload_build) {
		/* This tool links no NCCL; a job's application does. */
		printf("  real NCCL .......... none in this process: in a job, libnccl-det.so "
		       "takes the application's own libnccl.so.2\n");
		return;
	}
	if (nccl->path[0] == '\0') {
		printf("  real NCCL .......... NOT FOUND: every NCCL call would fail "
		       "(set NCCL_DET_NCCL_LIBRARY=/path/to/libnccl.so.2)\n");
		return;
	}
	printf("  real NCCL .......... %s\n", nccl->path);
	printf("  found by ........... %s\n", nccl->found_by);
	info_print_version("NCCL version .......", nccl->version);
}

/* The NCCL functions (ncclX, not nccl-det's own ncclDet*) a 64-bit ELF file exports. */
static int info_elf_nccl_exports(const char *file, void (*each)(const char *name, void *context),
				 void *context)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	void *map = MAP_FAILED;
	if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(Elf64_Ehdr))
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return -1;
	const size_t size = (size_t)st.st_size;
	const unsigned char *bytes = map;
	const Elf64_Ehdr *eh = map;
	int count = -1;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > size ||
	    (size - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum)
		goto out;
	const Elf64_Shdr *sections = (const Elf64_Shdr *)(bytes + eh->e_shoff);
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		const Elf64_Shdr *symtab = &sections[i];
		if (symtab->sh_type != SHT_DYNSYM || symtab->sh_link >= eh->e_shnum)
			continue;
		const Elf64_Shdr *strtab = &sections[symtab->sh_link];
		if (symtab->sh_offset > size || symtab->sh_size > size - symtab->sh_offset ||
		    strtab->sh_offset > size || strtab->sh_size > size - strtab->sh_offset ||
		    strtab->sh_size == 0)
			goto out;
		const Elf64_Sym *symbols = (const Elf64_Sym *)(bytes + symtab->sh_offset);
		const char *names = (const char *)(bytes + strtab->sh_offset);
		/* The string table ends in a NUL: every name within it is terminated. */
		if (names[strtab->sh_size - 1] != '\0')
			goto out;
		count = 0;
		for (size_t k = 0; k < symtab->sh_size / sizeof(Elf64_Sym); k++) {
			const Elf64_Sym *sym = &symbols[k];
			if (sym->st_name >= strtab->sh_size || sym->st_shndx == SHN_UNDEF ||
			    ELF64_ST_TYPE(sym->st_info) != STT_FUNC ||
			    ELF64_ST_BIND(sym->st_info) != STB_GLOBAL)
				continue;
			const char *name = names + sym->st_name;
			if (strncmp(name, "nccl", 4) != 0 || strncmp(name, "ncclDet", 7) == 0)
				continue;
			each(name, context);
			count++;
		}
		break;
	}
out:
	munmap(map, size);
	return count;
}

#define INFO_GAPS_LISTED 6

struct info_gaps {
	void *real;
	int missing;
	/* The INFO_GAPS_LISTED alphabetically first of them. */
	char listed[INFO_GAPS_LISTED][128];
};

static void info_gap_check(const char *name, void *context)
{
	struct info_gaps *gaps = context;
	if (dlsym(gaps->real, name) != NULL)
		return;
	(void)dlerror();
	int kept = gaps->missing < INFO_GAPS_LISTED ? gaps->missing : INFO_GAPS_LISTED;
	gaps->missing++;
	/* Insertion into the sorted few: the last one drops out when they are full. */
	int at = kept;
	while (at > 0 && strcmp(gaps->listed[at - 1], name) > 0)
		at--;
	if (at == INFO_GAPS_LISTED)
		return;
	if (kept == INFO_GAPS_LISTED)
		kept--;
	memmove(gaps->listed[at + 1], gaps->listed[at],
		(size_t)(kept - at) * sizeof(gaps->listed[0]));
	snprintf(gaps->listed[at], sizeof(gaps->listed[at]), "%s", name);
}

/*
 * The drop-in exports the functions of every NCCL 2.21-2.29 (doc/loading.md): those
 * the real NCCL lacks return ncclInvalidUsage when called.  Says how many and which.
 */
static void info_print_dropin_gaps(const char *dropin, const char *real)
{
	void *handle = dlopen(real, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
	if (handle == NULL)
		handle = dlopen(real, RTLD_LAZY | RTLD_LOCAL);
	if (handle == NULL) {
		(void)dlerror();
		return;
	}
	struct info_gaps gaps = {.real = handle, .missing = 0};
	const int exported = info_elf_nccl_exports(dropin, info_gap_check, &gaps);
	if (exported < 0) {
		printf("  drop-in exports .... (cannot read %s)\n", dropin);
	} else if (gaps.missing == 0) {
		printf("  drop-in exports .... %d NCCL functions, all in this NCCL\n", exported);
	} else {
		printf("  drop-in exports .... %d NCCL functions, %d not in this NCCL (a call "
		       "returns ncclInvalidUsage):",
		       exported, gaps.missing);
		for (int i = 0; i < gaps.missing && i < INFO_GAPS_LISTED; i++)
			printf(" %s", gaps.listed[i]);
		printf("%s\n", gaps.missing > INFO_GAPS_LISTED ? " ..." : "");
	}
	/* Left loaded, as the drop-in leaves it. */
}

/* What info_loading found: would nccl-det divert in this environment, and why not. */
struct info_verdict {
	bool diverts;
	char why[256];
};

/*
 * Can NCCL load this plugin: `value` (one item of NCCL_TUNER_PLUGIN or NCCL_NET_PLUGIN)
 * the way NCCL tries it, a path as it is, else libnccl-<kind>-<value>.so through the
 * loader, privately (nccl-det's library has no constructor).
 */
static bool info_plugin_loads(const char *value, const char *kind, char *detail, size_t size)
{
	char name[INFO_PATH_MAX];
	if (strchr(value, '/') != NULL || strncmp(value, "libnccl-", 8) == 0)
		snprintf(name, sizeof(name), "%s", value);
	else
		snprintf(name, sizeof(name), "libnccl-%s-%s.so", kind, value);
	void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (handle == NULL) {
		const char *error = dlerror();
		snprintf(detail, size, "%s cannot be loaded: %s", name,
			 error != NULL ? error : "?");
		return false;
	}
	struct link_map *map = NULL;
	if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != NULL && map->l_name != NULL)
		snprintf(detail, size, "loads %s", map->l_name);
	else
		snprintf(detail, size, "loads %s", name);
	/*
	 * Left loaded, as NCCL leaves its plugins: unloading may leave exit-time handlers
	 * of the library (its static CUDA runtime's, a sanitizer's) pointing nowhere.
	 */
	return true;
}

static void info_loading(struct info_verdict *verdict)
{
	printf("\n== loading mode\n");
	const char *preload = getenv("LD_PRELOAD");
	printf("  LD_PRELOAD ......... %s\n", preload != NULL ? preload : "(unset)");

	/*
	 * 1. A copy of nccl-det already in this process: preloaded (this tool links
	 * neither).  Asked first, before this tool loads any NCCL itself.
	 */
	struct info_copy copy = {.found = false};
	struct info_nccl from_copy = {.asked = false};
	(void)dl_iterate_phdr(info_find_copy, &copy);
	bool preloaded_dropin = false;
	if (copy.found) {
		void *preloaded = dlopen(copy.path, RTLD_LAZY | RTLD_NOLOAD);
		const char *base = strrchr(copy.path, '/');
		preloaded_dropin =
			strncmp(base != NULL ? base + 1 : copy.path, "libnccl.so", 10) == 0;
		printf("  preloaded nccl-det . %s (%s)\n", copy.path,
		       preloaded_dropin ? "the drop-in libnccl.so.2" : "libnccl-det.so");
		if (preloaded != NULL) {
			info_ask_copy(preloaded, &from_copy);
			if (dlclose(preloaded) != 0)
				(void)dlerror();
		}
	} else {
		printf("  preloaded nccl-det . none\n");
	}

	/* 2. What an application's dlopen("libnccl.so.2") (XLA, pynccl) gets here. */
	void *nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	bool dropin = false;
	char nccl_path[INFO_PATH_MAX] = "";
	if (nccl == NULL) {
		const char *error = dlerror();
		printf("  libnccl.so.2 ....... not found by the loader (%s)\n",
		       error != NULL ? error : "?");
	} else {
		struct link_map *map = NULL;
		if (dlinfo(nccl, RTLD_DI_LINKMAP, &map) == 0 && map != NULL && map->l_name != NULL)
			snprintf(nccl_path, sizeof(nccl_path), "%s", map->l_name);
		dropin = dlsym(nccl, INFO_MARKER) != NULL;
		(void)dlerror();
		printf("  libnccl.so.2 ....... %s: %s\n", nccl_path[0] != '\0' ? nccl_path : "?",
		       dropin ? "the nccl-det drop-in" : "the real NCCL (no drop-in in the way)");
		if (dropin && !from_copy.asked)
			info_ask_copy(nccl, &from_copy);
	}

	/* 3. The plugin variables (plugins cannot divert: pinned NCCL only). */
	const char *tuner = info_env("NCCL_TUNER_PLUGIN");
	const char *net = info_env("NCCL_NET_PLUGIN");
	bool tuner_det = info_names_det(tuner, "libnccl-tuner-det.so");
	bool net_det = info_names_det(net, "libnccl-net-det.so");
	printf("  NCCL_TUNER_PLUGIN .. %s%s\n", tuner != NULL ? tuner : "(unset)",
	       tuner_det ? "  (nccl-det's tuner)" : "");
	printf("  NCCL_NET_PLUGIN .... %s%s\n", net != NULL ? net : "(unset)",
	       net_det ? "  (nccl-det's net plugin, with its tuner)" : "");

	/* A plugin named but not loadable gives NCCL's own behaviour: say so. */
	bool plugin_loads = false;
	const char *variables[2][4] = {
		{"NCCL_TUNER_PLUGIN", tuner, "tuner", "libnccl-tuner-det.so"},
		{"NCCL_NET_PLUGIN", net, "net", "libnccl-net-det.so"}};
	for (int i = 0; i < 2; i++) {
		char item[INFO_PATH_MAX], detail[INFO_PATH_MAX + 128];
		const char *plugin =
			info_det_item(variables[i][1], variables[i][3], item, sizeof(item));
		if (plugin == NULL)
			continue;
		const bool loads =
			info_plugin_loads(plugin, variables[i][2], detail, sizeof(detail));
		plugin_loads = plugin_loads || loads;
		printf("  %-18s %s\n", i == 0 ? "tuner plugin ......" : "net plugin ........",
		       detail);
	}

	const char *mode;
	verdict->diverts = false;
	if (copy.found)
		mode = preloaded_dropin ? "drop-in (preloaded): every NCCL user is diverted"
					: "LD_PRELOAD: applications linking libnccl.so.2 are "
					  "diverted (not dlopen+dlsym users such as JAX)";
	else if (dropin)
		mode = "drop-in (by the loader's search path): libnccl.so.2 users are diverted";
	else if ((tuner_det || net_det) && plugin_loads)
		mode = "plugins only: NCCL's all-reduce is pinned (run-to-run reproducible), "
		       "not nccl-det's size-invariant all-reduce";
	else if (tuner_det || net_det)
		mode = "none: the plugin variables name nccl-det, but NCCL cannot load it (above)";
	else
		mode = "none: nccl-det is not loaded by this environment";
	printf("  mode in effect ..... %s\n", mode);
	if (copy.found || dropin) {
		verdict->diverts = true;
	} else {
		snprintf(verdict->why, sizeof(verdict->why), "%s", mode);
	}
	if (verdict->diverts && !ndet_settings_get()->enable) {
		verdict->diverts = false;
		snprintf(verdict->why, sizeof(verdict->why),
			 "NCCL_DET_ENABLE=0: every call passes through to NCCL");
	}

	printf("\n== real NCCL\n");
	if (from_copy.asked) {
		info_print_copy(&from_copy, copy.found && !preloaded_dropin);
		const char *dropin_path =
			preloaded_dropin ? copy.path : (dropin ? nccl_path : NULL);
		if (dropin_path != NULL && dropin_path[0] != '\0' && from_copy.answered &&
		    from_copy.path != NULL && from_copy.path[0] != '\0')
			info_print_dropin_gaps(dropin_path, from_copy.path);
	} else if (nccl != NULL) {
		info_get_version_t get_version = (info_get_version_t)dlsym(nccl, "ncclGetVersion");
		int version = 0;
		printf("  real NCCL .......... %s (what libnccl.so.2 resolves to)\n", nccl_path);
		if (get_version == NULL || get_version(&version) != ncclSuccess)
			version = 0;
		info_print_version("NCCL version .......", version);
	} else {
		printf("  real NCCL .......... none found by the loader; nccl-det would look at "
		       "NCCL_DET_NCCL_LIBRARY, the framework's wheel and the system\n");
	}
	/* The NCCL stays loaded: unloading it may run its destructors at a bad time. */
}

/*
 * The oldest Linux driver a CUDA runtime of this major version runs on (minor version
 * compatibility; the runtime is linked statically, so the driver is the one
 * requirement): NVIDIA's CUDA compatibility tables.
 */
static const char *info_minimum_driver(int cudart_version)
{
	switch (cudart_version / 1000) {
	case 11:
		return "450.80.02";
	case 12:
		return "525.60.13";
	case 13:
		return "580.65.06";
	default:
		return "see NVIDIA's CUDA compatibility table";
	}
}

static void info_build(void)
{
	printf("\n== build\n");
	printf("  GPU code ........... %s\n", NDET_INFO_GENCODE);
	printf("  fp8 GPU code ....... %s\n", NDET_INFO_FP8_GENCODE);
	printf("  CUDA runtime ....... %d.%d, linked statically: needs an NVIDIA driver >= %s\n",
	       CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10,
	       info_minimum_driver(CUDART_VERSION));
	int driver = 0;
	if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
		printf("  driver here ........ supports CUDA %d.%d%s\n", driver / 1000,
		       (driver % 1000) / 10,
		       driver < CUDART_VERSION
			       ? " (older than the runtime: every call goes to NCCL)"
			       : "");
	else
		printf("  driver here ........ none\n");
	(void)cudaGetLastError();
}

static void info_ipc(int count);

static void info_gpus(void)
{
	printf("\n== GPUs\n");
	int count = 0;
	cudaError_t error = cudaGetDeviceCount(&count);
	if (error != cudaSuccess || count == 0) {
		printf("  no GPU (%s)\n",
		       error != cudaSuccess ? cudaGetErrorString(error) : "no CUDA device");
		(void)cudaGetLastError();
		return;
	}
	for (int device = 0; device < count; device++) {
		struct cudaDeviceProp properties;
		error = cudaGetDeviceProperties(&properties, device);
		if (error != cudaSuccess) {
			printf("  GPU %d: %s\n", device, cudaGetErrorString(error));
			continue;
		}
		char uuid[64];
		size_t used = 0;
		for (int i = 0; i < 16; i++)
			used += (size_t)snprintf(uuid + used, sizeof(uuid) - used, "%s%02x",
						 i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "",
						 (unsigned char)properties.uuid.bytes[i]);
		printf("  GPU %d: %s, sm_%d%d, PCI %04x:%02x:%02x, GPU-%s, unified addressing %s "
		       "(CUDA IPC needs it)\n",
		       device, properties.name, properties.major, properties.minor,
		       properties.pciDomainID, properties.pciBusID, properties.pciDeviceID, uuid,
		       properties.unifiedAddressing ? "yes" : "NO");
	}
	/*
	 * Peer access is what same-process peers use; processes use CUDA IPC, which maps
	 * the same peer memory.  nccl-det still probes every peer at setup.
	 */
	printf("\n  P2P (cudaDeviceCanAccessPeer: row reads column)\n      ");
	for (int peer = 0; peer < count; peer++)
		printf(" %3d", peer);
	printf("\n");
	for (int device = 0; device < count; device++) {
		printf("  %3d ", device);
		for (int peer = 0; peer < count; peer++) {
			int can = 0;
			if (device == peer) {
				printf("   -");
				continue;
			}
			error = cudaDeviceCanAccessPeer(&can, device, peer);
			printf(" %3s", error != cudaSuccess ? "err" : can ? "yes" : "no");
		}
		printf("\n");
	}
	(void)cudaGetLastError();
	info_ipc(count);
}

/* ------------------------------------------------------------ CUDA IPC probe */

/*
 * CUDA IPC between processes, the way a job's ranks use it: this process exports a
 * cudaMalloc buffer on every GPU; a second process (this program again, started with
 * --ipc-probe-child: CUDA does not survive fork()) opens each one on every GPU, checks
 * what it holds and writes its mark into it; this process then checks the marks.
 * Containers without a shared IPC or PID namespace, or GPUs the second process
 * cannot reach, fail here as they would fail nccl-det's setup.
 */
#define INFO_IPC_BYTES      4096
#define INFO_IPC_MARKS      1024 /* where opener j writes its 16 bytes: + 16 j */
#define INFO_IPC_MAX        64
#define INFO_IPC_TIMEOUT_S  60
#define INFO_IPC_RECORDS_FD 3

enum info_ipc_result { INFO_IPC_OK, INFO_IPC_OPEN, INFO_IPC_READ, INFO_IPC_WRITE, INFO_IPC_CUDA };

struct info_ipc_record {
	int32_t result; /* enum info_ipc_result */
	int32_t error;  /* the cudaError_t of a failed call */
};

static bool info_io(int fd, void *buffer, size_t size, bool write_it)
{
	char *p = buffer;
	while (size > 0) {
		ssize_t done = write_it ? write(fd, p, size) : read(fd, p, size);
		if (done < 0 && errno == EINTR)
			continue;
		if (done <= 0)
			return false;
		p += done;
		size -= (size_t)done;
	}
	return true;
}

/*
 * The second process: handles on stdin, one record per (exporter, opener) on
 * INFO_IPC_RECORDS_FD (its stdout stays what it was: a library's log lines there
 * cannot corrupt the records).
 */
static int info_ipc_child(void)
{
	int32_t count = 0;
	static cudaIpcMemHandle_t handles[INFO_IPC_MAX];
	if (!info_io(0, &count, sizeof(count), false) || count < 1 || count > INFO_IPC_MAX ||
	    !info_io(0, handles, sizeof(handles[0]) * (size_t)count, false))
		return 2;
	for (int32_t from = 0; from < count; from++) {
		for (int32_t at = 0; at < count; at++) {
			struct info_ipc_record record = {INFO_IPC_OK, cudaSuccess};
			void *p = NULL;
			unsigned char got[16], mark[16];
			cudaError_t error = cudaSetDevice(at);
			if (error != cudaSuccess) {
				record = (struct info_ipc_record){INFO_IPC_CUDA, error};
			} else if ((error = cudaIpcOpenMemHandle(&p, handles[from],
								 cudaIpcMemLazyEnablePeerAccess)) !=
				   cudaSuccess) {
				record = (struct info_ipc_record){INFO_IPC_OPEN, error};
			} else {
				error = cudaMemcpy(got, p, sizeof(got), cudaMemcpyDeviceToHost);
				memset(mark, 0x40 + from, sizeof(mark));
				if (error != cudaSuccess || memcmp(got, mark, sizeof(got)) != 0)
					record = (struct info_ipc_record){INFO_IPC_READ, error};
				memset(mark, 0xa0 + at, sizeof(mark));
				error = cudaMemcpy((char *)p + INFO_IPC_MARKS + 16 * at, mark,
						   sizeof(mark), cudaMemcpyHostToDevice);
				if (error == cudaSuccess)
					error = cudaDeviceSynchronize();
				if (error != cudaSuccess && record.result == INFO_IPC_OK)
					record = (struct info_ipc_record){INFO_IPC_WRITE, error};
				(void)cudaIpcCloseMemHandle(p);
			}
			(void)cudaGetLastError();
			if (!info_io(INFO_IPC_RECORDS_FD, &record, sizeof(record), true))
				return 2;
		}
	}
	return 0;
}

/* Start this program again as the probe's second process; its pid, or -1. */
static pid_t info_ipc_spawn(int *to_child, int *from_child)
{
	int in[2], out[2];
	if (pipe(in) != 0)
		return -1;
	if (pipe(out) != 0) {
		close(in[0]);
		close(in[1]);
		return -1;
	}
	posix_spawn_file_actions_t actions;
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_adddup2(&actions, in[0], 0);
	posix_spawn_file_actions_adddup2(&actions, out[1], INFO_IPC_RECORDS_FD);
	posix_spawn_file_actions_addclose(&actions, in[1]);
	posix_spawn_file_actions_addclose(&actions, out[0]);
	char *args[] = {(char *)"nccl-det-info", (char *)"--ipc-probe-child", NULL};
	extern char **environ;
	pid_t pid = -1;
	if (posix_spawn(&pid, "/proc/self/exe", &actions, NULL, args, environ) != 0)
		pid = -1;
	posix_spawn_file_actions_destroy(&actions);
	close(in[0]);
	close(out[1]);
	if (pid < 0) {
		close(in[1]);
		close(out[0]);
		return -1;
	}
	*to_child = in[1];
	*from_child = out[0];
	return pid;
}

/* The child's records, waiting at most INFO_IPC_TIMEOUT_S for more. */
static bool info_ipc_read(int fd, struct info_ipc_record *records, size_t count)
{
	size_t want = count * sizeof(*records), have = 0;
	char *p = (char *)records;
	for (int waited = 0; have < want && waited < INFO_IPC_TIMEOUT_S * 10;) {
		struct pollfd ready = {.fd = fd, .events = POLLIN};
		int n = poll(&ready, 1, 100);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0) {
			waited++;
			continue;
		}
		ssize_t done = read(fd, p + have, want - have);
		if (done < 0 && errno == EINTR)
			continue;
		if (done <= 0)
			return false;
		have += (size_t)done;
	}
	return have == want;
}

static void info_ipc(int count)
{
	static const char *const names[] = {[INFO_IPC_OK] = "ok",
					    [INFO_IPC_OPEN] = "open",
					    [INFO_IPC_READ] = "read",
					    [INFO_IPC_WRITE] = "write",
					    [INFO_IPC_CUDA] = "cuda"};
	static cudaIpcMemHandle_t handles[INFO_IPC_MAX];
	static struct info_ipc_record records[INFO_IPC_MAX * INFO_IPC_MAX];
	void *buffers[INFO_IPC_MAX] = {NULL};
	const char *why = NULL;
	printf("\n  CUDA IPC (a second process opens this one's cudaMalloc memory, reads and "
	       "writes it:\n  row exports, column opens; n/a: GPUs without peer access)\n");
	if (count > INFO_IPC_MAX) {
		printf("  (the first %d of %d GPUs)\n", INFO_IPC_MAX, count);
		count = INFO_IPC_MAX;
	}
	static char exclusive[160];
	for (int i = 0; i < count && why == NULL; i++) {
		int mode = cudaComputeModeDefault;
		if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, i) == cudaSuccess &&
		    mode != cudaComputeModeDefault) {
			snprintf(exclusive, sizeof(exclusive),
				 "GPU %d is not in the default compute mode (mode %d): a second "
				 "process cannot use it while this one does",
				 i, mode);
			why = exclusive;
		}
	}
	for (int i = 0; i < count && why == NULL; i++) {
		cudaError_t error = cudaSetDevice(i);
		if (error == cudaSuccess)
			error = cudaMalloc(&buffers[i], INFO_IPC_BYTES);
		if (error == cudaSuccess)
			error = cudaMemset(buffers[i], 0x40 + i, INFO_IPC_BYTES);
		if (error == cudaSuccess)
			error = cudaIpcGetMemHandle(&handles[i], buffers[i]);
		if (error == cudaSuccess)
			error = cudaDeviceSynchronize();
		if (error != cudaSuccess)
			why = cudaGetErrorString(error);
	}
	int to_child = -1, from_child = -1;
	fflush(stdout); /* the child's own output comes after this heading */
	pid_t child = why == NULL ? info_ipc_spawn(&to_child, &from_child) : -1;
	if (why == NULL && child < 0)
		why = "could not start the second process";
	if (child >= 0) {
		const int32_t n = count;
		struct sigaction ignore = {.sa_handler = SIG_IGN}, old;
		sigaction(SIGPIPE, &ignore, &old);
		bool sent = info_io(to_child, (void *)&n, sizeof(n), true) &&
			    info_io(to_child, handles, sizeof(handles[0]) * (size_t)count, true);
		close(to_child);
		sigaction(SIGPIPE, &old, NULL);
		if (!sent || !info_ipc_read(from_child, records, (size_t)count * (size_t)count)) {
			why = "the second process did not answer (see its output above, or it "
			      "took more than a minute)";
			kill(child, SIGKILL);
		}
		close(from_child);
		/* Reaped within the probe's time too: a child stuck in its teardown is killed. */
		int status = 0;
		for (int waited = 0;; waited++) {
			const pid_t done = waitpid(child, &status, WNOHANG);
			if (done == child || (done < 0 && errno != EINTR))
				break;
			if (waited == INFO_IPC_TIMEOUT_S * 10)
				kill(child, SIGKILL);
			usleep(100000);
		}
	}
	if (why != NULL) {
		printf("  not probed: %s\n", why);
	} else {
		/* The second process's marks, read back here: its writes reached our memory. */
		for (int from = 0; from < count; from++) {
			unsigned char marks[16 * INFO_IPC_MAX];
			const bool read_back =
				cudaMemcpy(marks, (char *)buffers[from] + INFO_IPC_MARKS,
					   16 * (size_t)count,
					   cudaMemcpyDeviceToHost) == cudaSuccess;
			for (int at = 0; at < count; at++) {
				struct info_ipc_record *r = &records[from * count + at];
				unsigned char want[16];
				memset(want, 0xa0 + at, sizeof(want));
				if (r->result == INFO_IPC_OK &&
				    (!read_back || memcmp(marks + 16 * at, want, 16) != 0))
					r->result = INFO_IPC_WRITE;
			}
		}
		printf("      ");
		for (int at = 0; at < count; at++)
			printf(" %5d", at);
		printf("\n");
		const char *failure = NULL;
		cudaError_t failure_error = cudaSuccess;
		for (int from = 0; from < count; from++) {
			printf("  %3d ", from);
			for (int at = 0; at < count; at++) {
				const struct info_ipc_record *r = &records[from * count + at];
				const bool known = r->result >= 0 && r->result <= INFO_IPC_CUDA;
				/* Across GPUs without peer access IPC cannot work: not a failure.
				 */
				int peer = 1;
				if (at != from &&
				    (cudaDeviceCanAccessPeer(&peer, at, from) != cudaSuccess ||
				     !peer) &&
				    r->result != INFO_IPC_OK) {
					printf(" %5s", "n/a");
					continue;
				}
				printf(" %5s", known ? names[r->result] : "?");
				if (r->result != INFO_IPC_OK && failure == NULL) {
					failure = known ? names[r->result] : "?";
					failure_error = (cudaError_t)r->error;
				}
			}
			printf("\n");
		}
		if (failure != NULL)
			printf("  FAILED (first: %s, %s): nccl-det's setup fails the same way and "
			       "such communicators run in NCCL.  In containers, run all ranks in "
			       "one, or share the host's namespaces (docker --ipc=host "
			       "--pid=host); open = cudaIpcOpenMemHandle refused, read/write = "
			       "the memory was opened but did not hold or take the bytes\n",
			       failure,
			       failure_error != cudaSuccess ? cudaGetErrorName(failure_error)
							    : "no CUDA error");
	}
	for (int i = 0; i < count; i++)
		if (buffers[i] != NULL)
			(void)cudaFree(buffers[i]);
	(void)cudaGetLastError();
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{"no-gpu", no_argument, NULL, 'n'},
		{"get", required_argument, NULL, 'g'},
		{"all", no_argument, NULL, 'a'},
		{"check", no_argument, NULL, 'c'},
		/* The IPC probe's second process (info_ipc), not for users. */
		{"ipc-probe-child", no_argument, NULL, 'I'},
		{NULL, 0, NULL, 0},
	};
	bool gpus = true, all = false, check = false;
	const char *get = NULL;
	int option;
	while ((option = getopt_long(argc, argv, "hVng:ac", options, NULL)) != -1) {
		switch (option) {
		case 'h':
			info_usage(stdout);
			return 0;
		case 'V':
			printf("nccl-det-info %s\n", NCCL_DET_VERSION_STRING);
			return 0;
		case 'n':
			gpus = false;
			break;
		case 'g':
			get = optarg;
			break;
		case 'a':
			all = true;
			break;
		case 'c':
			check = true;
			break;
		case 'I':
			return info_ipc_child();
		default:
			info_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		info_usage(stderr);
		return 2;
	}
	if (get != NULL) {
		char value[4096];
		if (!ndet_settings_value_text(get, value, sizeof(value))) {
			fprintf(stderr, "nccl-det-info: %s is not an nccl-det setting\n", get);
			return 2;
		}
		printf("%s\n", value);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	printf("nccl-det %s (built against NCCL headers %d.%d.%d)\n", NCCL_DET_VERSION_STRING,
	       NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
	printf("\n== settings (environment, then $NCCL_CONF_FILE or ~/.nccl.conf, then "
	       "/etc/nccl.conf)\n");
	fflush(stdout);
	ndet_settings_dump_some(stdout, all);
	struct info_verdict verdict = {.diverts = false};
	info_loading(&verdict);
	if (gpus) {
		info_build();
		info_gpus();
	} else {
		printf("\n== build\n  GPU code ........... %s\n", NDET_INFO_GENCODE);
	}
	if (check) {
		if (verdict.diverts)
			printf("\ncheck: eligible calls would be diverted\n");
		else
			printf("\ncheck: nothing would be diverted: %s\n", verdict.why);
	}
	if (fflush(stdout) != 0)
		return 1;
	return check && !verdict.diverts ? 1 : 0;
}
