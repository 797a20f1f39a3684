// rt_graph_cond: conditional graph nodes through the runtime API, with the calls NVIDIA's
// graphConditionalNodes sample makes: cudaGraphConditionalHandleCreate, cudaGraphAddNode of
// kernel and conditional nodes (IF, IF/ELSE, SWITCH, WHILE), cudaStreamGetCaptureInfo and
// cudaStreamUpdateCaptureDependencies around a node added to a capture, and
// cudaStreamBeginCaptureToGraph into a body graph. The kernels are drv_graph_cond's (the
// test driver has them by name); each launch's word checked.
#include "../programs/cond_kernels.cu"
#include "rtcommon.h"

static int failures;
static unsigned *d_value, *d_count, *d_out;

static void add_kernel_node(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n, void *func, void **args)
{
    cudaGraphNodeParams p = {cudaGraphNodeTypeKernel};
    p.kernel.func = func;
    p.kernel.gridDim = dim3(1);
    p.kernel.blockDim = dim3(1);
    p.kernel.kernelParams = args;
    cudaGraphNode_t node;
    CK(cudaGraphAddNode(&node, g, deps, NULL, n, &p));
}

static void add_amount(cudaGraph_t body, unsigned amount)
{
    void *args[] = {&d_out, &amount};
    add_kernel_node(body, NULL, 0, (void *)condAddU32, args);
}

static void expect_word(const char *what, cudaGraphExec_t e, unsigned value, unsigned count, unsigned want)
{
    unsigned got = 0;
    CK(cudaMemcpy(d_value, &value, 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_count, &count, 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(d_out, 0, 4));
    CK(cudaGraphLaunch(e, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(&got, d_out, 4, cudaMemcpyDeviceToHost));
    printf("%s value=%u count=%u: %u\n", what, value, count, got);
    if (got != want) {
        fprintf(stderr, "%s with %u: %u, expected %u\n", what, value, got, want);
        failures++;
    }
}

// condSet -> a conditional node of type with size bodies, body i adding amounts[i].
static void branches(const char *what, cudaGraphConditionalNodeType type, unsigned size, const unsigned *amounts,
                     unsigned values)
{
    cudaGraph_t g;
    cudaGraphExec_t e;
    cudaGraphNode_t set, cond;
    cudaGraphConditionalHandle h;
    CK(cudaGraphCreate(&g, 0));
    CK(cudaGraphConditionalHandleCreate(&h, g));
    void *args[] = {&d_value, &h};
    cudaGraphNodeParams p = {cudaGraphNodeTypeKernel};
    p.kernel.func = (void *)condSet;
    p.kernel.gridDim = dim3(1);
    p.kernel.blockDim = dim3(1);
    p.kernel.kernelParams = args;
    CK(cudaGraphAddNode(&set, g, NULL, NULL, 0, &p));
    cudaKernelNodeParams kp;
    CK(cudaGraphKernelNodeGetParams(set, &kp));
    if (kp.func != (void *)condSet || kp.gridDim.x != 1 || kp.blockDim.x != 1 ||
        *(unsigned **)kp.kernelParams[0] != d_value || *(cudaGraphConditionalHandle *)kp.kernelParams[1] != h) {
        fprintf(stderr, "%s: the kernel node's parameters read back otherwise\n", what);
        failures++;
    }
    cudaGraphNodeParams c = {cudaGraphNodeTypeConditional};
    c.conditional.handle = h;
    c.conditional.type = type;
    c.conditional.size = size;
    CK(cudaGraphAddNode(&cond, g, &set, NULL, 1, &c));
    for (unsigned i = 0; i < size; i++)
        add_amount(c.conditional.phGraph_out[i], amounts[i]);
    CK(cudaGraphInstantiate(&e, g, 0));
    for (unsigned v = 0; v < values; v++) {
        unsigned want = type == cudaGraphCondTypeSwitch ? (v < size ? amounts[v] : 0)
                        : v ? amounts[0] : size > 1 ? amounts[1] : 0;
        expect_word(what, e, v, 0, want);
    }
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphDestroy(g));
}

// The sample's simpleDoWhileGraph: a WHILE node whose handle takes 1 at each launch, its body captured.
static void do_while(void)
{
    cudaGraph_t g;
    cudaGraphExec_t e;
    cudaGraphNode_t cond;
    cudaGraphConditionalHandle h;
    cudaStream_t s;
    CK(cudaGraphCreate(&g, 0));
    CK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    cudaGraphNodeParams c = {cudaGraphNodeTypeConditional};
    c.conditional.handle = h;
    c.conditional.type = cudaGraphCondTypeWhile;
    c.conditional.size = 1;
    CK(cudaGraphAddNode(&cond, g, NULL, NULL, 0, &c));
    CK(cudaStreamCreate(&s));
    CK(cudaStreamBeginCaptureToGraph(s, c.conditional.phGraph_out[0], nullptr, nullptr, 0,
                                     cudaStreamCaptureModeGlobal));
    condCountDown<<<1, 1, 0, s>>>(d_count, h);
    condAddU32<<<1, 1, 0, s>>>(d_out, 1);
    CK(cudaStreamEndCapture(s, nullptr));
    CK(cudaStreamDestroy(s));
    CK(cudaGraphInstantiate(&e, g, 0));
    expect_word("do-while", e, 0, 5, 5);
    expect_word("do-while", e, 0, 2, 2);
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphDestroy(g));
}

// The sample's capturedWhileGraph.
static void captured_while(void)
{
    cudaGraph_t graph;
    cudaGraphExec_t e;
    cudaStreamCaptureStatus status;
    const cudaGraphNode_t *deps;
    size_t ndeps;
    cudaStream_t s;
    cudaGraphConditionalHandle h;
    CK(cudaStreamCreate(&s));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaStreamGetCaptureInfo(s, &status, NULL, &graph, &deps, NULL, &ndeps));
    CK(cudaGraphConditionalHandleCreate(&h, graph));
    condSet<<<1, 1, 0, s>>>(d_value, h);
    CK(cudaStreamGetCaptureInfo(s, &status, NULL, &graph, &deps, NULL, &ndeps));
    cudaGraphNode_t cond;
    cudaGraphNodeParams c = {cudaGraphNodeTypeConditional};
    c.conditional.handle = h;
    c.conditional.type = cudaGraphCondTypeWhile;
    c.conditional.size = 1;
    CK(cudaGraphAddNode(&cond, graph, deps, NULL, ndeps, &c));
    cudaGraph_t body = c.conditional.phGraph_out[0];
    CK(cudaStreamUpdateCaptureDependencies(s, &cond, NULL, 1, cudaStreamSetCaptureDependencies));
    condAddU32<<<1, 1, 0, s>>>(d_out, 1000);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaStreamBeginCaptureToGraph(s, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    condCountDown<<<1, 1, 0, s>>>(d_count, h);
    condAddU32<<<1, 1, 0, s>>>(d_out, 1);
    CK(cudaStreamEndCapture(s, nullptr));
    CK(cudaStreamDestroy(s));
    CK(cudaGraphInstantiate(&e, graph, 0));
    expect_word("captured while", e, 0, 3, 1000);
    expect_word("captured while", e, 1, 3, 1003);
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphDestroy(graph));
}

int main()
{
    CK(cudaMalloc(&d_value, 4));
    CK(cudaMalloc(&d_count, 4));
    CK(cudaMalloc(&d_out, 4));
    const unsigned one[] = {1}, two[] = {10, 100}, four[] = {1, 2, 4, 8};
    branches("if", cudaGraphCondTypeIf, 1, one, 2);
    branches("if/else", cudaGraphCondTypeIf, 2, two, 2);
    branches("switch", cudaGraphCondTypeSwitch, 4, four, 5);
    do_while();
    captured_while();
    CK(cudaFree(d_out));
    CK(cudaFree(d_count));
    CK(cudaFree(d_value));
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
