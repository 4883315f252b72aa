# Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
"""PyTorch cases beyond torch_divert.py; one rank per process.

    torch_extras.py CASE            one rank (environment: RANK, WORLD, PORT)
    torch_extras.py check CASE LOG...   judge a finished job from its ranks' logs

Cases (test/gpu/torch_extras.sh runs each with N processes on one GPU):
  graph       the communicator's first all-reduces are captured by torch.cuda.graph;
              three replays with fresh inputs are bit-exact against the CPU tree, and
              the same calls made eagerly give the same bits.  With
              TORCH_NCCL_USE_COMM_NONBLOCKING=1 nccl-det's setup itself runs inside
              the capture (non-blocking communicators are set up at their first
              eligible call; one eager int32 all-reduce first makes PyTorch create
              the communicator, which NCCL cannot do inside a capture).
  expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (buffers are cuMem/VMM
              memory, which CUDA IPC cannot export): all-reduces at interior offsets of
              such buffers, bit-exact.
  streams     1000 all-reduces alternating between two torch streams (some async_op,
              which PyTorch runs on the process group's own stream), shapes, dtypes and
              ops varying call by call, no host sync in between: all bit-exact, which
              holds only if every rank executed them in issue order.
  ddp         a small model trained with DDP twice, bucket_cap_mb 1 and 25: reports
              how many final weights differ (0 under nccl-det).
  basic       a few float all-reduces (checked against the tree when diverted, else
              for closeness) and one int64 one: with NCCL_DET_ENABLE=0 or
              NCCL_DET_TEST_FAIL=ipc_open@1 every call must reach NCCL.
  ineligible  eligible calls (bit-exact), int64 (exact, forwarded), a PreMulSum op (diverted)
              with one WARN, or with NCCL_DET_STRICT=1 refused with ncclInvalidUsage.
  query       the basic calls, then the README's way for a PyTorch user to ask whether the
              process group's communicator is diverted (ProcessGroupNCCL's _comm_ptr()
              handed to ncclDetCommQuery through ctypes); the process group is never
              destroyed, so the STATS line must come from the process's exit, and rank
              0's log must hold the verdict line (NCCL_DEBUG's VERSION level).

Every case ends with one int32 all-reduce (forwarded by nccl-det), so that NCCL's COLL
log is known to be read right.  Each rank prints one JSON line: ok, errors, the calls
it made that nccl-det should divert ("eligible") and forward ("forwarded").  The check
mode matches them against nccl-det's NCCL_DET_STATS line and NCCL's COLL log
(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL: one "AllReduce: opCount" line per call NCCL
ran) and compares the ranks.
"""
import hashlib
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

def torch_modules():
    """torch, torch.distributed and the reference of torch_divert.py (the check mode
    does not need them)."""
    # Deterministic cuBLAS for the DDP case; must precede CUDA's initialisation.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    import torch.distributed as dist
    import torch_divert
    return torch, dist, torch_divert


class Rank:
    """One rank's process group, device and findings."""

    def __init__(self, case):
        self.torch, self.dist, self.ref = torch_modules()
        torch, dist = self.torch, self.dist
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD"])
        self.device = torch.device("cuda", self.rank % torch.cuda.device_count())
        torch.cuda.set_device(self.device)
        # device_id creates the NCCL communicator now (eager init), not at the first
        # collective: communicators cannot be created inside a graph capture.
        dist.init_process_group("nccl", rank=self.rank, world_size=self.world,
                                init_method="tcp://127.0.0.1:%s" % os.environ["PORT"],
                                device_id=self.device)
        self.ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
                    "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
                    "avg": dist.ReduceOp.AVG}
        self.result = {"case": case, "rank": self.rank, "world": self.world,
                       "torch": torch.__version__, "errors": [], "eligible": 0,
                       "forwarded": 0, "refused": 0,
                       "env": {k: os.environ.get(k, "") for k in (
                           "NCCL_DET_ENABLE", "NCCL_DET_TEST_FAIL", "NCCL_DET_STRICT",
                           "TORCH_NCCL_USE_COMM_NONBLOCKING", "PYTORCH_CUDA_ALLOC_CONF",
                           "CUDA_MPS_PIPE_DIRECTORY")}}

    @property
    def diverting(self):
        """Whether eligible calls should be diverted (and so match the tree)."""
        env = self.result["env"]
        return env["NCCL_DET_ENABLE"] != "0" and env["NCCL_DET_TEST_FAIL"] in ("", "none")

    def expect(self, condition, message):
        if not condition and len(self.result["errors"]) < 20:
            self.result["errors"].append(message)
        return condition

    def inputs(self, dtype, count, seed):
        return self.ref.inputs(self.rank, dtype, count, seed)

    def compare(self, got, dtype, count, seed, op, what):
        """Bits against the tree when diverted, else within NCCL's rounding."""
        want = self.ref.reference(self.world, dtype, count, seed, op)
        got = got.cpu()
        if self.diverting:
            bad = int((self.ref.bits(got) != self.ref.bits(want)).sum())
            return self.expect(bad == 0, "%s: %d of %d elements off the tree" % (what, bad, count))
        return self.within_rounding(got, want, dtype, self.magnitude(dtype, count, seed, op), what)

    def magnitude(self, dtype, count, seed, op):
        """Per element, the size the rounding errors of any reduction order scale with."""
        values = [self.ref.inputs(r, dtype, count, seed).double().abs() for r in range(self.world)]
        result = values[0]
        for value in values[1:]:
            if op == "prod":
                result = result * value
            elif op in ("max", "min"):
                result = self.torch.maximum(result, value)
            else:
                result = result + value
        return result / self.world if op == "avg" else result

    def within_rounding(self, got, want, dtype, magnitude, what):
        """NCCL's result (another order, partial sums rounded to the dtype) against the
        tree: a sum with cancellation is only as exact as its operands are large."""
        torch = self.torch
        epsilon = {torch.float64: 2.0 ** -52, torch.float32: 2.0 ** -23,
                   torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
        error = (got.cpu().double() - want.double()).abs()
        bad = int((error > 4 * self.world * epsilon * magnitude).sum())
        return self.expect(bad == 0, "%s: %d of %d elements of NCCL's result are farther from "
                           "the reference than its rounding allows" % (what, bad, got.numel()))

    def all_reduce(self, tensor, op="sum", kind="eligible", **kwargs):
        if self.result[kind] is not None:  # None: not counted (DDP)
            self.result[kind] += 1
        return self.dist.all_reduce(tensor, op=self.ops[op] if isinstance(op, str) else op,
                                    **kwargs)

    def phase(self, name):
        """Wait for the device and say how far the rank got: a fault reported late (a
        sticky CUDA error, under MPS in every client) is placed between two phases."""
        try:
            self.torch.cuda.synchronize()
        except Exception as error:
            print("PHASE %s: device error: %s" % (name, str(error)[:200]), flush=True)
            raise
        print("PHASE %s: ok" % name, flush=True)

    def finish(self):
        """The int32 call every case ends with, teardown (nccl-det's STATS line), JSON."""
        torch = self.torch
        data = torch.full((5,), self.rank + 1, dtype=torch.int32, device=self.device)
        total = self.world * (self.world + 1) // 2
        try:
            self.all_reduce(data, kind="forwarded")
            self.expect(data.cpu().tolist() == [total] * 5, "int32 sum: %s" % data.cpu().tolist())
            self.phase("final int32 all-reduce")
        except Exception as error:  # e.g. a process group broken by an earlier error
            self.expect(False, "the final int32 all-reduce failed: %s" % str(error)[:300])
        if os.environ.get("EXTRAS_NO_DESTROY") != "1":
            self.dist.destroy_process_group()
        self.result["ok"] = not self.result["errors"]
        print(json.dumps(self.result), flush=True)
        return 0 if self.result["ok"] else 1


def case_graph(me):
    torch = me.torch
    calls = [(torch.float32, "sum", 1000), (torch.bfloat16, "sum", 65537),
             (torch.float16, "max", 7), (torch.float64, "avg", 4099),
             (torch.float32, "prod", (1 << 20) + 3), (torch.bfloat16, "min", 1)]
    buffers = [torch.zeros(count, dtype=dtype, device=me.device) for dtype, _, count in calls]
    if os.environ.get("TORCH_NCCL_USE_COMM_NONBLOCKING") == "1":
        # PyTorch creates the communicator at its first collective, and NCCL cannot
        # initialise a non-blocking one inside a global-mode capture: its init thread's
        # CUDA calls are refused ("operation not permitted when stream is capturing",
        # NCCL 2.28.9, before nccl-det is involved at all).  One eager int32
        # all-reduce (forwarded) creates it; nccl-det's setup still waits for the
        # first eligible call, which is inside the capture below.
        warm = torch.ones(5, dtype=torch.int32, device=me.device)
        me.all_reduce(warm, kind="forwarded")
    me.phase("before capture")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for buffer, (_, op, _) in zip(buffers, calls):
            me.all_reduce(buffer, op)
    me.phase("captured")
    replayed = None
    for replay in range(3):
        seeds = [1000 * (replay + 1) + i for i in range(len(calls))]
        for buffer, (dtype, _, count), seed in zip(buffers, calls, seeds):
            buffer.copy_(me.inputs(dtype, count, seed))
        graph.replay()
        me.phase("replay %d" % replay)
        replayed = [buffer.cpu() for buffer in buffers]
        for got, (dtype, op, count), seed in zip(replayed, calls, seeds):
            me.compare(got, dtype, count, seed, op, "replay %d %s/%s/%d" % (
                replay, str(dtype).split(".")[1], op, count))
    # The last replay's calls, eagerly: the same bits.
    for got, (dtype, op, count), i in zip(replayed, calls, range(len(calls))):
        data = me.inputs(dtype, count, 3000 + i).to(me.device)
        me.all_reduce(data, op)
        bad = int((me.ref.bits(data.cpu()) != me.ref.bits(got)).sum())
        me.expect(bad == 0, "eager %s/%s/%d: %d elements differ from the replay" % (
            str(dtype).split(".")[1], op, count, bad))
    me.phase("eager after the replays")
    del graph


def case_expandable(me):
    torch = me.torch
    probe = torch.empty(1 << 20, device=me.device)
    segments = torch.cuda.memory_snapshot()
    flags = {segment.get("is_expandable") for segment in segments}
    me.result["expandable_segments"] = True in flags if flags != {None} else "unknown"
    me.expect(me.result["expandable_segments"] is not False,
              "the allocator's segments are not expandable: PYTORCH_CUDA_ALLOC_CONF=%r" %
              os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
    del probe
    seed = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for op in ("sum", "max", "avg"):
            for count in (1, 7, 65537, (1 << 20) + 3):
                seed += 1
                # An interior slice: the pointer is inside a VMM mapping, off its base.
                big = torch.zeros(count + 13, dtype=dtype, device=me.device)
                view = big[5:5 + count]
                view.copy_(me.inputs(dtype, count, seed))
                me.all_reduce(view, op)
                me.compare(view, dtype, count, seed, op, "%s/%s/%d at offset 5" % (
                    str(dtype).split(".")[1], op, count))
                me.expect(bool((big[:5] == 0).all()) and bool((big[5 + count:] == 0).all()),
                          "%s/%s/%d wrote outside its slice" % (dtype, op, count))


def case_streams(me, calls=1000):
    torch = me.torch
    dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    ops = ("sum", "max", "avg")
    specs = [(dtypes[i % 4], ops[i % 3], 1 + (i * 37) % 301, 5000 + i) for i in range(calls)]
    tensors = [me.inputs(dtype, count, seed).to(me.device) for dtype, _, count, seed in specs]
    streams = (torch.cuda.Stream(), torch.cuda.Stream())
    for stream in streams:  # the inputs were written on the current stream
        stream.wait_stream(torch.cuda.current_stream())
    works = []
    for i, (tensor, (_, op, _, _)) in enumerate(zip(tensors, specs)):
        with torch.cuda.stream(streams[i % 2]):
            work = me.all_reduce(tensor, op, async_op=(i % 5 == 4))
            if work is not None:
                works.append(work)
    for work in works:
        work.wait()
    for stream in streams:
        torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    for i, (tensor, (dtype, op, count, seed)) in enumerate(zip(tensors, specs)):
        if not me.compare(tensor, dtype, count, seed, op, "call %d (stream %d, %s/%s/%d)" % (
                i, i % 2, str(dtype).split(".")[1], op, count)):
            break


def train(me, bucket_cap_mb, steps=12):
    torch = me.torch
    from torch.nn.parallel import DistributedDataParallel
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 256)).to(me.device)
    ddp = DistributedDataParallel(model, device_ids=[me.device.index],
                                  bucket_cap_mb=bucket_cap_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator().manual_seed(100 + me.rank)
    for _ in range(steps):
        x = torch.randn(64, 512, generator=generator).to(me.device)
        y = torch.randn(64, 256, generator=generator).to(me.device)
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
    torch.cuda.synchronize()
    weights = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    del ddp
    return weights


def case_ddp(me):
    # DDP's own all-reduces are not counted here: None means "some" (float buckets
    # diverted, anything else forwarded; the check still matches NCCL's log with the
    # forwarded ones).
    me.result["eligible"] = me.result["forwarded"] = None
    runs = {mb: train(me, mb) for mb in (1, 25)}
    me.result["parameters"] = runs[1].numel()
    me.result["digest"] = {str(mb): hashlib.sha256(w.numpy().tobytes()).hexdigest()
                           for mb, w in runs.items()}
    me.result["bucket_differ"] = int((runs[1].view(me.torch.int32) !=
                                      runs[25].view(me.torch.int32)).sum())


def case_basic(me):
    torch = me.torch
    seed = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for count in (7, 65537):
            seed += 1
            data = me.inputs(dtype, count, seed).to(me.device)
            me.all_reduce(data, "sum")
            me.compare(data, dtype, count, seed, "sum", "%s/sum/%d" % (
                str(dtype).split(".")[1], count))
    integers = torch.arange(1000, dtype=torch.int64, device=me.device) * (me.rank + 1)
    me.all_reduce(integers, kind="forwarded")
    total = me.world * (me.world + 1) // 2
    me.expect(torch.equal(integers.cpu(), torch.arange(1000, dtype=torch.int64) * total),
              "int64 sum is wrong")


def case_ineligible(me):
    """int64 forwarded silently; a PreMulSum op diverted (strict or not: since nccl-det
    runs PreMulSum, no floating-point reduction PyTorch can issue falls back; fp8, the
    one that would, PyTorch refuses for NCCL reductions itself)."""
    torch, dist = me.torch, me.dist
    case_basic(me)  # eligible calls still diverted (strict or not), then int64
    count, seed = 4097, 77
    data = me.inputs(torch.float32, count, seed).to(me.device)
    premul = dist._make_nccl_premul_sum(2.0)
    me.all_reduce(data, premul)
    # Each leaf times 2 is exact, and so is every rounding of the tree scaled by 2: the
    # PreMulSum(2) result is twice the sum's tree, bit for bit.
    want = me.ref.reference(me.world, torch.float32, count, seed, "sum") * 2
    bad = int((me.ref.bits(data.cpu()) != me.ref.bits(want)).sum())
    me.expect(bad == 0, "PreMulSum(2): %d of %d elements off twice the tree" % (bad, count))


def case_query(me):
    """The snippet of doc/loading.md, as a user would paste it."""
    import ctypes
    torch, dist = me.torch, me.dist
    case_basic(me)
    pg = dist.distributed_c10d._get_default_group()
    comm = ctypes.c_void_p(pg._get_backend(torch.device("cuda"))._comm_ptr())
    query = ctypes.CDLL(None).ncclDetCommQuery
    diverted, reason = ctypes.c_int(), ctypes.c_char_p()
    status = query(comm, ctypes.byref(diverted), ctypes.byref(reason))
    me.result["query"] = {"status": status, "diverted": diverted.value,
                          "reason": (reason.value or b"").decode(errors="replace")}
    me.expect(status == 0 and diverted.value == 1 and me.diverting or
              status == 0 and diverted.value == 0 and not me.diverting,
              "ncclDetCommQuery: status %d, diverted %d, reason %r" % (
                  status, diverted.value, me.result["query"]["reason"]))


CASES = {"query": case_query, "graph": case_graph, "expandable": case_expandable, "streams": case_streams,
         "ddp": case_ddp, "basic": case_basic, "ineligible": case_ineligible}


# ---------------------------------------------------------------- check mode

VERDICT = re.compile(r"NCCL-DET VERSION nccl-det \S+ \(([^)]*)\): communicator \S+ of (\d+) "
                     r"ranks: (.*)")
STATS = re.compile(r"NCCL-DET STATS communicator \S+ rank \d+/\d+ \(([^)]*)\): diverted (\d+) "
                   r"calls, \d+ bytes(?: \([^)]*\))?; fallbacks: (.*); refused \(strict\) (\d+); "
                   r"failed (\d+)")


def parse_log(path):
    """The rank's JSON line, nccl-det's STATS and WARN lines, NCCL's AllReduce lines."""
    found = {"json": None, "stats": [], "warns": [], "nccl_allreduce": 0, "verdicts": []}
    with open(path, errors="replace") as log:
        for line in log:
            if line.startswith("{"):
                found["json"] = json.loads(line)
            elif "NCCL-DET WARN" in line:
                found["warns"].append(line.strip())
            elif "NCCL INFO AllReduce: opCount" in line:
                found["nccl_allreduce"] += 1
            verdict = VERDICT.search(line)
            if verdict:
                found["verdicts"].append(verdict.groups())
            match = STATS.search(line)
            if match:
                fallbacks = {} if match.group(3) == "none" else {
                    name: int(n) for name, n in re.findall(r"(.+?) (\d+)(?:, |$)", match.group(3))}
                found["stats"].append({"state": match.group(1), "diverted": int(match.group(2)),
                                       "fallbacks": fallbacks, "refused": int(match.group(4)),
                                       "failed": int(match.group(5))})
    return found


def check_rank(case, path):
    """Problems of one rank's log, and a one-line summary."""
    log = parse_log(path)
    result = log["json"]
    if result is None:
        return ["%s: no result line (the rank failed: see the log)" % path], ""
    problems = ["%s: %s" % (path, e) for e in result["errors"]]
    env = result["env"]
    enabled = env["NCCL_DET_ENABLE"] != "0"
    injected = env["NCCL_DET_TEST_FAIL"] not in ("", "none")
    eligible, forwarded, refused = result["eligible"], result["forwarded"], result["refused"]
    diverted = sum(s["diverted"] for s in log["stats"])
    fallback = sum(sum(s["fallbacks"].values()) for s in log["stats"])
    refused_seen = sum(s["refused"] for s in log["stats"])
    not_deterministic = [w for w in log["warns"] if "not deterministic" in w]
    summary = "rank %d: NCCL ran %d all-reduces; nccl-det diverted %d, forwarded %d, refused %d" % (
        result["rank"], log["nccl_allreduce"], diverted, fallback, refused_seen)

    def want(condition, message):
        if not condition:
            problems.append("%s: %s (%s)" % (path, message, summary))

    if not enabled:
        want(diverted == 0, "NCCL_DET_ENABLE=0 but calls were diverted")
        if eligible is None:  # DDP: some number of bucket all-reduces
            want(log["nccl_allreduce"] > (forwarded or 0), "NCCL_DET_ENABLE=0: NCCL ran only %d "
                 "all-reduces" % log["nccl_allreduce"])
        else:
            want(log["nccl_allreduce"] == eligible + forwarded,
                 "NCCL_DET_ENABLE=0: NCCL's log shows %d all-reduces, the rank made %d" % (
                     log["nccl_allreduce"], eligible + forwarded))
        want(not log["warns"], "NCCL_DET_ENABLE=0 but nccl-det WARNed: %s" % log["warns"][:1])
        return problems, summary
    want(log["stats"], "no NCCL-DET STATS line (NCCL_DET_STATS=1; was the communicator "
         "destroyed or aborted?)")
    # Every call nccl-det did not divert or refuse is one NCCL ran, and the reverse.
    want(log["nccl_allreduce"] == fallback,
         "NCCL's log shows %d all-reduces, nccl-det forwarded %d" % (log["nccl_allreduce"], fallback))
    want(refused_seen == refused, "refused %d calls, expected %d" % (refused_seen, refused))
    if injected:
        failing = re.search(r"@(\d+)", env["NCCL_DET_TEST_FAIL"])
        want(diverted == 0, "the injected failure still left calls diverted")
        want(fallback == eligible + forwarded, "forwarded %d, expected every call (%d)" % (
            fallback, eligible + forwarded))
        want(len(not_deterministic) == 1, "%d 'not deterministic' WARNs, expected one: %s" % (
            len(not_deterministic), not_deterministic))
        if failing and not_deterministic:
            want("on rank %s " % failing.group(1) in not_deterministic[0],
                 "the WARN does not name rank %s: %s" % (failing.group(1), not_deterministic[0]))
        return problems, summary
    if eligible is None:
        want(diverted > 0, "nothing was diverted")
    else:
        want(diverted == eligible, "diverted %d calls, the rank made %d eligible ones" % (
            diverted, eligible))
    if forwarded is not None:
        want(fallback == forwarded, "forwarded %d, expected %d" % (fallback, forwarded))
    strict_warns = [w for w in log["warns"] if "NCCL_DET_STRICT=1" in w]
    want(len(strict_warns) == refused, "%d strict WARNs, expected %d" % (len(strict_warns), refused))
    want(not not_deterministic, "unexpected fallback WARN: %s" % not_deterministic[:1])
    return problems, summary


def check(case, paths):
    problems, results = [], []
    for path in paths:
        rank_problems, summary = check_rank(case, path)
        problems += rank_problems
        if summary:
            print("  " + summary)
        results.append(parse_log(path)["json"])
    results = [r for r in results if r is not None]
    if case == "ddp" and results:
        enabled = results[0]["env"]["NCCL_DET_ENABLE"] != "0"
        differ = [r["bucket_differ"] for r in results]
        print("  DDP %s, %d parameters: bucket_cap_mb 1 vs 25: %s elements differ per rank" % (
            "under nccl-det" if enabled else "under plain NCCL", results[0]["parameters"], differ))
        if len({json.dumps(r["digest"], sort_keys=True) for r in results}) != 1:
            problems.append("DDP: the ranks' final weights differ")
        if enabled and any(differ):
            problems.append("DDP under nccl-det: bucket sizes changed the final weights")
        if not enabled:
            print("  plain NCCL: %s" % ("the bucket sizes changed the final weights, as "
                                        "expected" if any(differ) else
                                        "the bucket sizes did NOT change the final weights "
                                        "in this run (reported, not a failure)"))
    if case == "query":
        for path in paths:
            log = parse_log(path)
            result = log["json"] or {}
            rank = result.get("rank")
            print("  rank %s: ncclDetCommQuery %s; verdict lines %s" % (
                rank, result.get("query"), log["verdicts"]))
            # One verdict per communicator on its rank 0 (PyTorch's default group here).
            if rank == 0 and not any(v[2].startswith("deterministic") for v in log["verdicts"]):
                problems.append("%s: no 'deterministic' verdict line on rank 0" % path)
            if rank not in (None, 0) and log["verdicts"]:
                problems.append("%s: a verdict line on rank %s" % (path, rank))
    if case == "ineligible" and results and "strict_error" in results[0]:
        print("  strict: %s" % results[0]["strict_error"])
    for problem in problems:
        print("  FAIL " + problem)
    return 1 if problems else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "check":
        return check(sys.argv[2], sys.argv[3:])
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(__doc__, file=sys.stderr)
        return 2
    me = Rank(sys.argv[1])
    CASES[sys.argv[1]](me)
    return me.finish()


if __name__ == "__main__":
    sys.exit(main())
