/* drv_tables: the private export tables that the libraries on a GPU host ask for beyond cudart's
 * (cuBLASLt's 1734dc26, cuFFT's 6e163fbe), checked for what those libraries rely on: the table's
 * size, and the module tools' slot 7 visiting every function of a module (cuFFT takes the kernel
 * of each module it loads from it). Also cuModuleGetFunctionCount and cuModuleEnumerateFunctions.
 *   drv_tables IMAGE */
#include "drv_common.h"

static const CUuuid tools_module_id = {{(char)0x6e, 0x16, 0x3f, (char)0xbe, (char)0xb9, 0x58, 0x44, 0x4d,
					 (char)0x83, 0x5c, (char)0xe1, (char)0x82, (char)0xaf, (char)0xf1,
					 (char)0x99, 0x1e}};
static const CUuuid nvjet_id = {{0x17, 0x34, (char)0xdc, 0x26, (char)0x80, 0x0d, 0x47, 0x45, (char)0x87, 0x26,
				 (char)0xc0, (char)0xf1, (char)0xe7, (char)0xdd, (char)0x8b, (char)0xca}};

#define MAX_FUNCTIONS 64

struct visited {
	CUfunction f[MAX_FUNCTIONS];
	int n;
};

static void visit(void *arg, CUfunction f)
{
	struct visited *v = arg;
	if (v->n < MAX_FUNCTIONS)
		v->f[v->n] = f;
	v->n++;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: drv_tables IMAGE\n");
		return 2;
	}
	CUcontext ctx = drv_open_device0();
	CUmodule mod;
	CHECK(cuModuleLoadData(&mod, drv_read_file(argv[1], NULL)));

	unsigned count = 0;
	CHECK(cuModuleGetFunctionCount(&count, mod));
	EXPECT(count > 0 && count <= MAX_FUNCTIONS, "%u functions", count);
	if (count == 0 || count > MAX_FUNCTIONS)
		return drv_exit_status();
	CUfunction fns[MAX_FUNCTIONS];
	CHECK(cuModuleEnumerateFunctions(fns, count, mod));
	const char *names[MAX_FUNCTIONS];
	/* The driver loads them lazily: a name, not an attribute, is what every one has yet. */
	for (unsigned i = 0; i < count; i++)
		CHECK(cuFuncGetName(&names[i], fns[i]));
	qsort(names, count, sizeof names[0], by_name);
	printf("functions %u:", count);
	for (unsigned i = 0; i < count; i++)
		printf(" %s", names[i]);
	printf("\n");
	/* Fewer slots than functions: fills that many. */
	CUfunction one[1] = {NULL};
	CHECK(cuModuleEnumerateFunctions(one, 1, mod));
	EXPECT(one[0] != NULL, "enumerating one function gave none");

	const uint64_t *tools = NULL;
	CHECK(cuGetExportTable((const void **)&tools, &tools_module_id));
	EXPECT(tools && tools[0] == 0x318, "module tools table size %#llx", tools ? (unsigned long long)tools[0] : 0ull);
	struct visited v = {.n = 0};
	int (*visit_functions)(CUcontext, CUmodule, void (*)(void *, CUfunction), void *) =
		(int (*)(CUcontext, CUmodule, void (*)(void *, CUfunction), void *))tools[7];
	int visited = visit_functions(ctx, mod, visit, &v);
	EXPECT(visited == (int)count && v.n == (int)count, "slot 7 returned %d, visited %d of %u", visited, v.n,
	       count);
	for (int i = 0; i < v.n && i < MAX_FUNCTIONS; i++) {
		int found = 0;
		for (unsigned j = 0; j < count; j++)
			found |= v.f[i] == fns[j];
		EXPECT(found, "slot 7 visited a function cuModuleEnumerateFunctions did not give");
	}
	printf("module tools: slot 7 visited %d\n", v.n);

	const uint64_t *nvjet = NULL;
	CHECK(cuGetExportTable((const void **)&nvjet, &nvjet_id));
	EXPECT(nvjet && nvjet[0] == 0x88, "1734dc26 table size %#llx", nvjet ? (unsigned long long)nvjet[0] : 0ull);
	printf("1734dc26: %llu slots\n", nvjet ? (unsigned long long)nvjet[0] / 8 - 1 : 0ull);

	CHECK(cuModuleUnload(mod));
	drv_close_device0();
	return drv_exit_status();
}
