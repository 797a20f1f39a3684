/* drv_graph_uobj [IMAGE]: graph user objects, whose destructor is this program's function. An
 * object released by the program; one moved into a graph, kept alive by the executable
 * graph after the graph is destroyed; one retained by a graph beside the program. Each
 * destructor runs once, when (and only when) the last reference is gone: checked after
 * each step, waiting for it where CUDA may run it later, on a thread of its own. */
#include "drv_common.h"

#include <unistd.h>

static int destroyed[3];

static void CUDA_CB destroy(void *p)
{
	__atomic_add_fetch((int *)p, 1, __ATOMIC_ACQ_REL);
}

/* Waits up to 5 s for object i's destructor count to be want, then checks it. */
static void expect_destroyed(const char *what, int i, int want)
{
	CHECK(cuCtxSynchronize());
	for (int t = 0; t < 5000 && __atomic_load_n(&destroyed[i], __ATOMIC_ACQUIRE) != want; t++)
		usleep(1000);
	int got = __atomic_load_n(&destroyed[i], __ATOMIC_ACQUIRE);
	printf("%s: destructor ran %d time(s)\n", what, got);
	EXPECT(got == want, "%s: the destructor ran %d times, expected %d", what, got, want);
}

int main(void) /* an image given is not used */
{
	drv_open_device0();
	CUuserObject a, b, c;
	CUgraph g;
	CUgraphNode node;
	CUgraphExec e;

	CHECK(cuUserObjectCreate(&a, &destroyed[0], destroy, 2, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CHECK(cuUserObjectRelease(a, 1));
	expect_destroyed("a, one of two references released", 0, 0);
	CHECK(cuUserObjectRetain(a, 2));
	CHECK(cuUserObjectRelease(a, 2));
	expect_destroyed("a, retained and released", 0, 0);
	CHECK(cuUserObjectRelease(a, 1));
	expect_destroyed("a, the last released", 0, 1);

	CHECK(cuUserObjectCreate(&b, &destroyed[1], destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CHECK(cuGraphCreate(&g, 0));
	CHECK(cuGraphAddEmptyNode(&node, g, NULL, 0));
	CHECK(cuGraphRetainUserObject(g, b, 1, CU_GRAPH_USER_OBJECT_MOVE));
	CHECK(cuGraphInstantiateWithFlags(&e, g, 0));
	CHECK(cuGraphDestroy(g));
	expect_destroyed("b, its graph destroyed", 1, 0);
	CHECK(cuGraphLaunch(e, NULL));
	CHECK(cuStreamSynchronize(NULL));
	CHECK(cuGraphExecDestroy(e));
	expect_destroyed("b, its executable graph destroyed", 1, 1);

	CHECK(cuUserObjectCreate(&c, &destroyed[2], destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CHECK(cuGraphCreate(&g, 0));
	CHECK(cuGraphRetainUserObject(g, c, 2, 0));
	CHECK(cuGraphReleaseUserObject(g, c, 1));
	CHECK(cuUserObjectRelease(c, 1));
	expect_destroyed("c, the graph's reference left", 2, 0);
	CHECK(cuGraphDestroy(g));
	expect_destroyed("c, its graph destroyed", 2, 1);

	drv_close_device0();
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
