/* transport/rdma/rdma_regions.c: pinned regions registered once per protection domain, at
 * their first use; kept until unpinned (or, in use, until their last user is done) or
 * until the domain is forgotten; read-only memory only offered; a failed registration not
 * tried again. Against stub verbs that count registrations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "rdma_conn.h"

void rm_rdma_pin(void *addr, size_t len);
void rm_rdma_unpin(void *addr);

static int regs, deregs, live;
static const char *readonly_lo, *readonly_hi; /* writable registration refused here */
static const char *refused_lo, *refused_hi;   /* every registration refused here */

static struct ibv_mr *stub_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	const char *p = addr;
	regs++;
	if ((p >= refused_lo && p < refused_hi) || (p >= readonly_lo && p < readonly_hi && (access & IBV_ACCESS_LOCAL_WRITE)))
		return NULL;
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = mr->rkey = (uint32_t)regs;
	live++;
	return mr;
}

static int stub_dereg_mr(struct ibv_mr *mr)
{
	deregs++;
	live--;
	free(mr);
	return 0;
}

int main(void)
{
	static const struct rm_verbs_api api = {.reg_mr = stub_reg_mr, .dereg_mr = stub_dereg_mr};
	struct ibv_pd pd1, pd2;
	struct rdma_conn c1, c2;
	memset(&c1, 0, sizeof(c1));
	memset(&c2, 0, sizeof(c2));
	c1.pd = &pd1, c1.v = &api;
	c2.pd = &pd2, c2.v = &api;
	static char a[1 << 20], b[4096], r[4096];
	size_t usable;
	void *tok, *tok2;

	/* Not pinned: nothing. */
	EXPECT(!rregion_get(&c1, a, 0, &usable, &tok) && regs == 0);

	/* Registered at the first use in a domain, once; what is left of it from p. */
	rm_rdma_pin(a, sizeof(a));
	struct ibv_mr *m1 = rregion_get(&c1, a + 100, 1, &usable, &tok);
	EXPECT(m1 && regs == 1 && usable == sizeof(a) - 100 && m1->addr == a);
	rregion_put(tok);
	EXPECT(rregion_get(&c1, a + sizeof(a) - 1, 0, &usable, &tok) == m1 && regs == 1 && usable == 1);
	rregion_put(tok);
	EXPECT(!rregion_get(&c1, a + sizeof(a), 0, &usable, &tok));
	struct ibv_mr *m2 = rregion_get(&c2, a, 0, &usable, &tok2);
	EXPECT(m2 && m2 != m1 && regs == 2);

	/* Unpinned while c2 uses it: kept until c2 is done, then both registrations go. */
	rm_rdma_unpin(a);
	EXPECT(deregs == 0);
	EXPECT(!rregion_get(&c1, a, 0, &usable, &tok)); /* no longer offered to new users */
	rregion_put(tok2);
	EXPECT(deregs == 2 && live == 0);

	/* Read-only memory: offered, never a destination of reads. */
	readonly_lo = b, readonly_hi = b + sizeof(b);
	rm_rdma_pin(b, sizeof(b));
	EXPECT(!rregion_get(&c1, b, 1, &usable, &tok));
	EXPECT(rregion_get(&c1, b, 0, &usable, &tok) && live == 1);
	rregion_put(tok);

	/* A registration refused is not tried again in that domain. */
	refused_lo = r, refused_hi = r + sizeof(r);
	rm_rdma_pin(r, sizeof(r));
	int before = regs;
	EXPECT(!rregion_get(&c1, r, 0, &usable, &tok));
	int tried = regs - before;
	EXPECT(tried == 2); /* writable, then read-only */
	EXPECT(!rregion_get(&c1, r, 0, &usable, &tok) && regs - before == tried);

	/* A domain forgotten (its connection ends): its registrations go; another use
	 * registers again. */
	EXPECT(rregion_get(&c2, b, 0, &usable, &tok2) && live == 2);
	rregion_put(tok2);
	rregion_forget_pd(&pd1);
	EXPECT(live == 1);
	before = regs;
	EXPECT(rregion_get(&c1, b, 0, &usable, &tok) && regs == before + 2 && live == 2);
	rregion_put(tok);

	rm_rdma_unpin(b);
	rm_rdma_unpin(r);
	rm_rdma_unpin(a); /* not pinned any more: nothing */
	EXPECT(live == 0);
	if (failures)
		return 1;
	printf("rdma regions: ok\n");
	return 0;
}
