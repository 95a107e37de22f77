/* The simulator's integer kernels: InferMax's unified scheduler step loop (Alg. 1), first-fit
 * bin packing (Vasuki §5.2), BlendServe's dual scanner and the split of a batch over DP
 * replicas.
 *
 * Plain C over caller-owned int64/double arrays, loaded with ctypes (tuner/sim/kernels.py): no
 * Python headers, no allocation, no I/O. Why C and not numba: numba cost every command ~0.7 s
 * of import and target set-up and a fresh install ~7 s of compilation; this builds once with
 * the package.
 *
 * The state layout (column numbers) is defined here and checked against tuner/sim/scheduler.py
 * and tuner/sim/steps.py when the library is loaded (tk_layout).
 */
#include <stdint.h>
#include <string.h>

typedef int64_t i64;
/* Per-request state (req, grp, q) is 32-bit: 52 bytes a request instead of 104, the bulk of a
 * multi-million-request simulation's memory. Token counts, blocks and step numbers fit (the
 * caller caps the steps below 2^31); CACHED_BEHIND is read modulo 2^32 (see admit_waiting). */
typedef int32_t i32;

/* step record columns (tuner/sim/steps.py) */
enum { PREFILL_TOKENS, PREFILL_SQ, PREFILL_CTX, DECODES, DECODE_KV, SAMPLED, KV_BLOCKS,
       PREEMPTED, RUNNING, N_COLS };
/* scalar state c[] */
enum { N_RUNNING, WAIT_HEAD, N_WAITING, FREE_BLOCKS, CACHED_TOKENS, DONE, N_BATCH, BUDGET,
       PREFILL_BUDGET, N_PREEMPTED, ALLOCATED, N_SLOTS };
/* req[r * N_REQ_COLS + col] */
enum { PROMPT, OUTPUT, GROUP, PREFIX_BLOCKS, COMPUTED, GENERATED, BLOCKS, SHARED, FINISH_STEP,
       ARRIVAL_STEP, FIRST_STEP, CACHED_BLOCKS, CACHED_BEHIND, N_REQ_COLS };
/* grp[g * N_GRP_COLS + col] */
enum { G_REF, G_READY, G_OWNER, G_BLOCKS, N_GRP_COLS };
/* q[row * w + i]: the first four rows hold w = min(n, R_max) entries (no step runs or
 * batches more requests than R_max), the waiting deque, last, all n */
enum { Q_RUNNING, Q_BATCH_REQ, Q_BATCH_NEW, Q_BATCH_PREFILL, Q_WAITING, N_Q_COLS };
/* scheduler parameters kp[] (SchedulerParams' field order) */
enum { K_TOKEN_BUDGET, K_PREFILL_BUDGET, K_MAX_RUNNING, K_BLOCK_SIZE, K_CAPACITY_BLOCKS,
       K_PREFILL_FIRST, K_CHUNKED_PREFILL, K_DECODES_FIRST, K_UPFRONT_PROMPT_ALLOC,
       K_RESERVE_FULL, K_ADMIT_FULL_SEQUENCE, K_CACHE_PREEMPTED, K_CLIENT_CAP, K_STATE_BLOCKS,
       N_PARAMS };
/* how a call of tk_run ended */
enum { STATUS_OK, STATUS_STUCK, STATUS_MAX_STEPS, STATUS_FULL, STATUS_PAUSED };
/* the functions' argument lists: raised whenever one changes, so a stale build is refused */
enum { ABI_VERSION = 6 };  /* 5: K_CLIENT_CAP; 6: K_STATE_BLOCKS */

/* The numbers above in one array, so the loader can check them against the Python side. */
i64 tk_layout(i64 *out, i64 size) {
    const i64 v[] = { N_COLS, PREFILL_TOKENS, PREFILL_SQ, PREFILL_CTX, DECODES, DECODE_KV,
                      SAMPLED, KV_BLOCKS, PREEMPTED, RUNNING, N_SLOTS, N_REQ_COLS, N_GRP_COLS,
                      N_Q_COLS, N_PARAMS, PROMPT, OUTPUT, GROUP, PREFIX_BLOCKS, FINISH_STEP,
                      ARRIVAL_STEP, FIRST_STEP, CACHED_TOKENS, N_WAITING, FREE_BLOCKS, G_OWNER,
                      Q_WAITING, STATUS_FULL, STATUS_PAUSED, ABI_VERSION };
    i64 n = (i64)(sizeof v / sizeof v[0]);
    for (i64 i = 0; i < n && i < size; i++) out[i] = v[i];
    return n;
}

typedef struct {
    const i64 *k;
    i32 *req, *grp, *q;
    i64 *c;
    i64 n, w;
    /* Lazy decodes (tk_run with fast; see fast_step): a running request in its decode phase
     * whose blocks are tight is not touched step by step. Its REQ fields hold its state at
     * step t0[r] (-1: exact, not lazy); it finishes at a known step (bucket list fin, by step
     * mod H, linked through nxt) and takes a new block every B steps from a known phase (cls:
     * how many take one at steps = k mod B). */
    int lazy;
    i64 boff;             /* batch places taken by lazy decodes (their rows are not written) */
    i32 *t0, *nxt;        /* per request */
    i64 *fin, hmask, *cls;
    i64 *list, qlen;      /* the running list in order while lazy (finished ones linger) */
    i64 *ex, nex;         /* the running requests kept exact, in list order */
    i64 n_lazy, sum_c;
} State;

#define REQ(r, col) s->req[(r) * N_REQ_COLS + (col)]
#define GRP(g, col) s->grp[(g) * N_GRP_COLS + (col)]
#define Q(row, i) s->q[(row) * s->w + (i)]
#define C(slot) s->c[slot]
#define K(p) s->k[p]

static inline i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }
static inline i64 min64(i64 a, i64 b) { return a < b ? a : b; }
static inline i64 max64(i64 a, i64 b) { return a > b ? a : b; }

/* (cached tokens it can skip, prefix blocks it shares, blocks to allocate for a new group's
 * prefix) for request r at admission. It joins a group only when it uses the whole cached
 * prefix: the group's blocks are held until its last member leaves, so a member using part of
 * them could hold more than it needs and never fit. */
static void prefix_lookup(const State *s, i64 r, i64 *hit, i64 *sh, i64 *extra) {
    i64 g = REQ(r, GROUP), B = K(K_BLOCK_SIZE);
    *hit = 0; *sh = 0; *extra = 0;
    if (g >= 0 && GRP(g, G_REF) > 0 && GRP(g, G_READY)
            && REQ(r, PREFIX_BLOCKS) >= GRP(g, G_BLOCKS)) {
        *sh = GRP(g, G_BLOCKS);
        *hit = min64(*sh * B, REQ(r, PROMPT) + REQ(r, GENERATED) - 1);
    } else if (g >= 0 && GRP(g, G_REF) == 0) {  /* r computes the prefix for its group */
        *sh = REQ(r, PREFIX_BLOCKS);
        *extra = REQ(r, PREFIX_BLOCKS);
    }
}

/* Whether running request r is decoding: its next token is its last computed one. */
static inline int is_decode(const State *s, i64 r) {
    return REQ(r, PROMPT) + REQ(r, GENERATED) - REQ(r, COMPUTED) == 1 && REQ(r, GENERATED) > 0;
}

/* Put `new_tokens` tokens of request r at place j of the current step's batch. */
static inline void push(State *s, i64 j, i64 r, i64 new_tokens, int is_prefill) {
    Q(Q_BATCH_REQ, j) = r;
    Q(Q_BATCH_NEW, j) = new_tokens;
    Q(Q_BATCH_PREFILL, j) = is_prefill ? 1 : 0;
}

/* Give back request r's KV: its private blocks, its recurrent-state blocks (K_STATE_BLOCKS,
 * held by every running request: see admit_waiting) and its share of a group's prefix (whose
 * blocks are freed with the group's last user). Only a running request is released. */
static void release(State *s, i64 r) {
    C(FREE_BLOCKS) += REQ(r, BLOCKS) + K(K_STATE_BLOCKS);
    REQ(r, BLOCKS) = 0;
    if (REQ(r, SHARED) > 0) {
        i64 g = REQ(r, GROUP);
        GRP(g, G_REF) -= 1;
        if (GRP(g, G_REF) == 0) {
            C(FREE_BLOCKS) += GRP(g, G_BLOCKS);
            GRP(g, G_READY) = 0;
        }
        REQ(r, SHARED) = 0;
    }
}

/* Preempt the most recently admitted running request by recompute (its KV is dropped, its
 * generated tokens kept) and put it back at the front of the queue; returns it. Its blocks
 * join the free queue behind the ones already free (prefix caching keeps them until
 * allocations reach them; used when the preset has cache_preempted). */
static i64 evict_last(State *s) {
    i64 n = s->n;
    C(N_RUNNING) -= 1;
    i64 victim = Q(Q_RUNNING, C(N_RUNNING));
    REQ(victim, CACHED_BLOCKS) = REQ(victim, BLOCKS);
    REQ(victim, CACHED_BEHIND) = (i32)(uint32_t)(C(ALLOCATED) + C(FREE_BLOCKS));
    release(s, victim);
    REQ(victim, COMPUTED) = 0;
    C(WAIT_HEAD) = (C(WAIT_HEAD) - 1 + n) % n;
    Q(Q_WAITING, C(WAIT_HEAD)) = victim;
    C(N_WAITING) += 1;
    C(N_PREEMPTED) += 1;
    return victim;
}

/* The lazy running list without its finished requests (order kept). */
static void compact_list(State *s) {
    i64 j = 0;
    for (i64 i = 0; i < s->qlen; i++)
        if (REQ(s->list[i], FINISH_STEP) < 0) s->list[j++] = s->list[i];
    s->qlen = j;
}

/* Request r joins the running list at its end (while lazy: as an exact request). */
static inline void run_append(State *s, i64 r) {
    if (s->lazy) {
        if (s->qlen == 2 * s->w + 2) compact_list(s);  /* at most w of them run */
        s->list[s->qlen++] = r;
        s->ex[s->nex++] = r;
    } else {
        Q(Q_RUNNING, C(N_RUNNING)) = r;
    }
    C(N_RUNNING) += 1;
}

static inline void begin_step(State *s) {
    C(BUDGET) = K(K_TOKEN_BUDGET);
    C(PREFILL_BUDGET) = K(K_PREFILL_BUDGET);
    C(N_BATCH) = 0;
    C(N_PREEMPTED) = 0;
}

/* Private blocks request r takes at admission (shared prefix blocks excluded). */
static inline i64 admit_blocks(const State *s, i64 r, i64 hit, i64 new_tokens, i64 sh) {
    i64 B = K(K_BLOCK_SIZE), nb;
    if (K(K_RESERVE_FULL))
        nb = ceil_div(REQ(r, PROMPT) + REQ(r, OUTPUT), B);
    else if (K(K_UPFRONT_PROMPT_ALLOC) || K(K_PREFILL_FIRST))  /* V0's block manager */
        nb = ceil_div(REQ(r, PROMPT) + REQ(r, GENERATED), B);
    else  /* V1: the first chunk's */
        return max64(ceil_div(hit + new_tokens, B) - sh, 0);
    return nb - sh;
}

/* Admit waiting requests in queue order while R_max, the budgets and free KV allow; each gets
 * its first chunk (V0: its whole prompt, or it waits). A request that has not arrived yet stops
 * admission, unless the step would otherwise be empty (the clock then waits). With a client
 * cap N (K_CLIENT_CAP > 0: a closed-loop client, vllm bench serve --max-concurrency) request
 * r (its place in submission order) is sent only once r + 1 - N requests have finished: the
 * client sends the next request when one finishes, so at most N are in the engine at once.
 * Requests are sent in queue order and a preempted one (pushed back to the front) was sent,
 * so the head decides. */
static void admit_waiting(State *s, i64 step) {
    i64 n = s->n, B = K(K_BLOCK_SIZE);
    while (C(N_WAITING) > 0 && C(N_RUNNING) < K(K_MAX_RUNNING)) {
        i64 lim = min64(C(BUDGET), C(PREFILL_BUDGET));
        if (lim <= 0 && !K(K_PREFILL_FIRST)) break;  /* V0 tests the whole prompt below */
        i64 r = Q(Q_WAITING, C(WAIT_HEAD));
        if (REQ(r, ARRIVAL_STEP) > step && (C(N_RUNNING) > 0 || C(N_BATCH) > 0)) break;
        if (K(K_CLIENT_CAP) > 0 && r >= C(DONE) + K(K_CLIENT_CAP)) break;  /* not sent yet */
        i64 hit, sh, extra;
        prefix_lookup(s, r, &hit, &sh, &extra);
        if (K(K_CACHE_PREEMPTED) && REQ(r, CACHED_BLOCKS) > 0 && sh == 0) {
            /* a recompute skips the blocks the LRU free queue has not reused yet (vLLM frees a
             * sequence's blocks tail first, so what survives is its prefix) */
            /* blocks allocated since its preemption; CACHED_BEHIND holds the low 32 bits of
             * a running count, so the difference is taken modulo 2^32 (exact: a preempted
             * request is first in the queue long before 2^31 more blocks are allocated) */
            i64 since = (i64)(i32)((uint32_t)C(ALLOCATED) - (uint32_t)REQ(r, CACHED_BEHIND));
            i64 left = REQ(r, CACHED_BLOCKS) - max64(since, 0);
            if (left > 0)
                hit = max64(hit, min64(left * B, REQ(r, PROMPT) + REQ(r, GENERATED) - 1));
        }
        i64 remaining = REQ(r, PROMPT) + REQ(r, GENERATED) - hit, new_tokens;
        if (K(K_CHUNKED_PREFILL)) new_tokens = min64(remaining, lim);
        else if (remaining > lim) break;
        else new_tokens = remaining;
        /* a hybrid model's recurrent-state blocks (one per Mamba / Gated DeltaNet group) come
         * from the same pool with the request's first allocation, and count in its admission
         * check (vLLM V1 allocate_slots sums every group's blocks, MambaManager's included,
         * and returns None when they exceed the free ones; 0 for other models) */
        i64 nb = admit_blocks(s, r, hit, new_tokens, sh), st = K(K_STATE_BLOCKS);
        if (nb + extra + st > C(FREE_BLOCKS)) break;
        if (K(K_ADMIT_FULL_SEQUENCE)
                && ceil_div(REQ(r, PROMPT) + REQ(r, GENERATED), B) - sh + extra + st
                   > C(FREE_BLOCKS))
            break;  /* vLLM's scheduler_reserve_full_isl: the whole sequence must fit now */
        C(WAIT_HEAD) = (C(WAIT_HEAD) + 1) % n;
        C(N_WAITING) -= 1;
        i64 g = REQ(r, GROUP);
        if (sh > 0) {  /* join the group (the first member owns its prefix) */
            if (GRP(g, G_REF) == 0) {
                GRP(g, G_OWNER) = r;
                GRP(g, G_BLOCKS) = sh;
            }
            GRP(g, G_REF) += 1;
        }
        C(FREE_BLOCKS) -= nb + extra + st;
        C(ALLOCATED) += nb + extra + st;
        REQ(r, CACHED_BLOCKS) = 0;
        REQ(r, BLOCKS) = nb;
        REQ(r, SHARED) = sh;
        REQ(r, COMPUTED) = hit;
        C(CACHED_TOKENS) += hit;
        if (REQ(r, FIRST_STEP) < 0) REQ(r, FIRST_STEP) = step;
        run_append(s, r);
        push(s, C(N_BATCH) - s->boff, r, new_tokens, 1);
        C(N_BATCH) += 1;
        C(BUDGET) -= new_tokens;
        C(PREFILL_BUDGET) -= new_tokens;
    }
}

/* Give each running request its next tokens in admission order (Sarathi: all decodes in a first
 * pass, prefill chunks in a second), growing its KV; when KV runs out, evict from the most
 * recently admitted end. Stops when the request being scheduled is itself evicted. */
static void schedule_running(State *s) {
    i64 B = K(K_BLOCK_SIZE);
    i64 nrun = C(N_RUNNING), free_blocks = C(FREE_BLOCKS), ns = C(N_BATCH);
    i64 budget = C(BUDGET), pbudget = C(PREFILL_BUDGET), allocated = 0;
    int stop = 0;
    int passes = K(K_DECODES_FIRST) ? 2 : 1;
    for (int ps = 0; ps < passes; ps++) {
        i64 i = 0;
        while (!stop && i < nrun && budget > 0) {
            i64 r = Q(Q_RUNNING, i);
            i++;
            i64 remaining = REQ(r, PROMPT) + REQ(r, GENERATED) - REQ(r, COMPUTED);
            int is_pf = !is_decode(s, r);
            if (K(K_DECODES_FIRST) && is_pf == (ps == 0)) continue;
            i64 new_tokens = 1;
            if (is_pf) {  /* a chunk within both budgets (unchunked: the whole rest, or it waits) */
                i64 lim = min64(budget, pbudget);
                new_tokens = K(K_CHUNKED_PREFILL) ? min64(remaining, lim)
                                                  : (remaining <= lim ? remaining : 0);
                if (new_tokens <= 0) continue;
            }
            /* blocks to add: none while the tokens fit what it holds (no division on the
             * common path: a decode inside its last block), else ceil(overflow / B) */
            i64 over = REQ(r, COMPUTED) + new_tokens - (REQ(r, BLOCKS) + REQ(r, SHARED)) * B;
            i64 need = over > 0 ? ceil_div(over, B) : 0;
            if (need > free_blocks) {
                C(FREE_BLOCKS) = free_blocks;
                C(ALLOCATED) += allocated;
                allocated = 0;
                while (need > C(FREE_BLOCKS) && !stop) {
                    C(N_RUNNING) = nrun;
                    stop = evict_last(s) == r;
                    nrun = C(N_RUNNING);
                }
                free_blocks = C(FREE_BLOCKS);
                if (stop) break;
            }
            if (need > 0) {
                free_blocks -= need;
                allocated += need;
                REQ(r, BLOCKS) += need;
            }
            push(s, ns, r, new_tokens, is_pf);
            ns++;
            budget -= new_tokens;
            if (is_pf) pbudget -= new_tokens;
        }
    }
    C(N_RUNNING) = nrun;
    C(FREE_BLOCKS) = free_blocks;
    C(N_BATCH) = ns;
    C(BUDGET) = budget;
    C(PREFILL_BUDGET) = pbudget;
    C(ALLOCATED) += allocated;
}

/* The running sums of one step's record row. */
typedef struct { i64 pf_tokens, pf_sq, pf_ctx, decodes, decode_kv, sampled; } Sums;

/* Advance the request at place j of the batch by its tokens and add it to the sums; a request
 * that produced its last token releases its KV. Returns whether it finished. */
static inline int record_entry(State *s, i64 j, i64 step, Sums *m) {
    i64 B = K(K_BLOCK_SIZE);
    i64 r = Q(Q_BATCH_REQ, j), new_tokens = Q(Q_BATCH_NEW, j), ctx = REQ(r, COMPUTED);
    if (Q(Q_BATCH_PREFILL, j)) {
        m->pf_tokens += new_tokens;
        m->pf_sq += new_tokens * new_tokens;
        m->pf_ctx += new_tokens * ctx;
    } else {
        m->decodes += 1;
        m->decode_kv += ctx + 1;
    }
    i64 computed = ctx + new_tokens;
    REQ(r, COMPUTED) = computed;
    i64 g = REQ(r, GROUP);
    if (g >= 0 && REQ(r, SHARED) > 0 && GRP(g, G_OWNER) == r
            && computed >= GRP(g, G_BLOCKS) * B)
        GRP(g, G_READY) = 1;
    if (computed == REQ(r, PROMPT) + REQ(r, GENERATED)) {
        REQ(r, GENERATED) += 1;
        m->sampled += 1;
        if (REQ(r, GENERATED) == REQ(r, OUTPUT)) {
            release(s, r);
            REQ(r, FINISH_STEP) = step;
            C(DONE) += 1;
            return 1;
        }
    }
    return 0;
}

static void write_row(State *s, i64 *row, const Sums *m) {
    row[PREFILL_TOKENS] = m->pf_tokens;
    row[PREFILL_SQ] = m->pf_sq;
    row[PREFILL_CTX] = m->pf_ctx;
    row[DECODES] = m->decodes;
    row[DECODE_KV] = m->decode_kv;
    row[SAMPLED] = m->sampled;
    row[KV_BLOCKS] = K(K_CAPACITY_BLOCKS) - C(FREE_BLOCKS);
    row[PREEMPTED] = C(N_PREEMPTED);
    row[RUNNING] = C(N_RUNNING);
}

/* Write the step's batch into its record row and advance its requests; a request that produced
 * its last token releases its KV. Returns whether any request finished. */
static int record_step(State *s, i64 *row, i64 step) {
    Sums m = {0, 0, 0, 0, 0, 0};
    int any_done = 0;
    for (i64 j = 0; j < C(N_BATCH); j++)
        any_done |= record_entry(s, j, step, &m);
    if (any_done) {  /* drop finished requests from the running list, keeping its order */
        i64 j = 0;
        for (i64 i = 0; i < C(N_RUNNING); i++) {
            i64 r = Q(Q_RUNNING, i);
            if (REQ(r, FINISH_STEP) < 0) Q(Q_RUNNING, j++) = r;
        }
        C(N_RUNNING) = j;
    }
    write_row(s, row, &m);
    return any_done;
}

/* After a step with only decodes, no preemption, no completion and every running request
 * scheduled, the following steps repeat it until the first request finishes: admission cannot
 * succeed (free KV only shrinks, the running count and budget stay), so the batch only changes
 * by one token of context per request per step. Write those rows directly (as many as free KV
 * and the record's capacity allow: the rest runs step by step, to the same rows) and advance
 * the requests; returns the new step. inc: scratch of at least max(output) + 1 entries. */
static i64 skip_decodes(State *s, i64 *rec, i64 base, i64 cap, i64 step, i64 max_steps,
                        i64 *inc) {
    i64 B = K(K_BLOCK_SIZE), nrun = C(N_RUNNING);
    i64 m = REQ(Q(Q_RUNNING, 0), OUTPUT) - REQ(Q(Q_RUNNING, 0), GENERATED);
    for (i64 i = 1; i < nrun; i++) {
        i64 r = Q(Q_RUNNING, i);
        m = min64(m, REQ(r, OUTPUT) - REQ(r, GENERATED));
    }
    i64 kmax = min64(m - 1, max_steps - step);  /* the step where a request finishes runs exactly */
    /* stop where the queue's head arrives; a head that arrived earlier and still waits is held
     * back by KV, R_max or the client cap, which the skipped steps (no request finishes in
     * them) cannot free (offline jobs: always) */
    if (C(N_WAITING) > 0) {
        i64 head_arrival = REQ(Q(Q_WAITING, C(WAIT_HEAD)), ARRIVAL_STEP);
        if (head_arrival >= step) kmax = min64(kmax, head_arrival - step);
    }
    kmax = min64(kmax, base + cap - step);
    if (kmax <= 0) return step;
    /* inc[j]: blocks allocated at skipped step j (1-based), when c_r + j crosses r's holding */
    memset(inc, 0, (size_t)(kmax + 1) * sizeof(i64));
    i64 sum_c = 0;
    for (i64 i = 0; i < nrun; i++) {
        i64 r = Q(Q_RUNNING, i);
        sum_c += REQ(r, COMPUTED);
        for (i64 a = max64((REQ(r, BLOCKS) + REQ(r, SHARED)) * B - REQ(r, COMPUTED) + 1, 1);
             a <= kmax; a += B)
            inc[a] += 1;
    }
    i64 free_blocks = C(FREE_BLOCKS), n_skip = 0, acc = 0;
    while (n_skip < kmax && acc + inc[n_skip + 1] <= free_blocks) {
        n_skip++;
        acc += inc[n_skip];
    }
    if (n_skip == 0) return step;
    i64 used = K(K_CAPACITY_BLOCKS) - free_blocks;
    acc = 0;
    for (i64 j = 1; j <= n_skip; j++) {
        acc += inc[j];
        i64 *row = rec + (step + j - 1 - base) * N_COLS;
        memset(row, 0, N_COLS * sizeof(i64));
        row[DECODES] = nrun;
        row[DECODE_KV] = sum_c + nrun * j;
        row[SAMPLED] = nrun;
        row[KV_BLOCKS] = used + acc;
        row[RUNNING] = nrun;
    }
    for (i64 i = 0; i < nrun; i++) {
        i64 r = Q(Q_RUNNING, i);
        i64 a = max64((REQ(r, BLOCKS) + REQ(r, SHARED)) * B - REQ(r, COMPUTED) + 1, 1);
        if (n_skip >= a) REQ(r, BLOCKS) += 1 + (n_skip - a) / B;
        REQ(r, COMPUTED) += n_skip;
        REQ(r, GENERATED) += n_skip;
    }
    C(FREE_BLOCKS) = free_blocks - acc;
    C(ALLOCATED) += acc;
    return step + n_skip;
}

/* ---- lazy decodes ----------------------------------------------------------------------
 * A step's cost was a pass over every running request (~1.7 us a step at 256 of them, most of
 * a 1M-request simulation). Decodes are the bulk and are predictable: each takes one token,
 * its context grows by one, it needs a new block every B steps, it finishes at a known step.
 * While a step can take no decision that depends on the running list's order (every decode
 * is scheduled, no eviction, the prefill chunks see the budget they would see in order), such
 * decodes are priced as a count and a context sum and touched only when they finish
 * (fast_step); the other running requests (prefill chunks, decodes holding spare blocks) are
 * stepped as before. Any other step materialises every request and runs exactly. Same rows,
 * step for step (tests/test_kernels_lazy.py, benchmarks/kernel_equivalence.py). */

static inline i64 mod_b(i64 a, i64 b) { i64 m = a % b; return m < 0 ? m + b : m; }

/* Make running request r lazy from step t (its REQ fields exact at t) if it is decoding with
 * tight blocks (no spare block reserved); returns whether it did. */
static int make_lazy(State *s, i64 r, i64 t) {
    i64 B = K(K_BLOCK_SIZE), c0 = REQ(r, COMPUTED), g0 = REQ(r, GENERATED);
    if (!is_decode(s, r) || REQ(r, BLOCKS) + REQ(r, SHARED) != ceil_div(c0, B)) return 0;
    i64 g = REQ(r, GROUP);  /* an owner whose prefix outlasts its prompt makes it ready later */
    if (g >= 0 && REQ(r, SHARED) > 0 && GRP(g, G_OWNER) == r && !GRP(g, G_READY)) return 0;
    s->t0[r] = (i32)t;
    s->cls[mod_b(t - c0, B)] += 1;  /* a new block at the steps where c0 + (t' - t) = 0 mod B */
    i64 b = (t + REQ(r, OUTPUT) - g0 - 1) & s->hmask;  /* its last token's step */
    s->nxt[r] = (i32)s->fin[b];
    s->fin[b] = r;
    s->n_lazy += 1;
    s->sum_c += c0;
    return 1;
}

/* Write lazy request r's exact state at step t into its REQ fields (not lazy any more). */
static inline void materialise(State *s, i64 r, i64 t) {
    i64 d = t - s->t0[r], c = REQ(r, COMPUTED) + d;
    REQ(r, COMPUTED) = (i32)c;
    REQ(r, GENERATED) += (i32)d;
    REQ(r, BLOCKS) = (i32)(ceil_div(c, K(K_BLOCK_SIZE)) - REQ(r, SHARED));
    s->t0[r] = -1;
}

/* Start a lazy session at step t over the running list. */
static void enter_lazy(State *s, i64 t) {
    s->lazy = 1;
    s->qlen = s->nex = s->n_lazy = s->sum_c = 0;
    memset(s->cls, 0, (size_t)K(K_BLOCK_SIZE) * sizeof(i64));
    for (i64 i = 0; i < C(N_RUNNING); i++) {
        i64 r = Q(Q_RUNNING, i);
        s->list[s->qlen++] = r;
        if (!make_lazy(s, r, t)) s->ex[s->nex++] = r;
    }
}

/* End the lazy session at step t: every request exact, the running list back in q. */
static void leave_lazy(State *s, i64 t) {
    i64 j = 0;
    for (i64 i = 0; i < s->qlen; i++) {
        i64 r = s->list[i];
        if (REQ(r, FINISH_STEP) >= 0) continue;
        if (s->t0[r] >= 0) {
            s->fin[(s->t0[r] + REQ(r, OUTPUT) - REQ(r, GENERATED) - 1) & s->hmask] = -1;
            materialise(s, r, t);
        }
        Q(Q_RUNNING, j++) = r;
    }
    C(N_RUNNING) = j;
    s->lazy = 0;
    s->boff = 0;
}

/* Step `step` with the lazy decodes as aggregates, when the exact loop would take no decision
 * that depends on where they are in the running list; returns 0 (nothing changed) when it
 * cannot. The exact requests get their Q_BATCH places in the order schedule_running gives
 * them; the lazy decodes' places are implicit (boff). */
static int fast_step(State *s, i64 *row, i64 step) {
    if (s->n_lazy == 0) return 0;
    i64 B = K(K_BLOCK_SIZE), budget = C(BUDGET), pbudget = C(PREFILL_BUDGET);
    i64 need = s->cls[step % B], ndec = s->n_lazy, ne = 0;
    /* The exact loop's order: every decode one token, then the chunks in list order. With
     * chunked prefill (tk_run's condition) a request still prefilling never precedes a decode
     * in the list (one admitted behind it needs budget its chunk would have taken), so one
     * pass gives them that order too; decodes first (Sarathi) does by construction. */
    for (int pf = 0; pf < 2; pf++) {
        for (i64 e = 0; e < s->nex; e++) {
            i64 r = s->ex[e], new_tokens = 1;
            if (is_decode(s, r) == pf) continue;
            if (pf) {
                if (budget <= 0) break;
                new_tokens = min64(REQ(r, PROMPT) + REQ(r, GENERATED) - REQ(r, COMPUTED),
                                   min64(budget, pbudget));
                if (new_tokens <= 0) continue;
                budget -= new_tokens;
                pbudget -= new_tokens;
            } else {
                ndec++;
            }
            i64 over = REQ(r, COMPUTED) + new_tokens - (REQ(r, BLOCKS) + REQ(r, SHARED)) * B;
            need += over > 0 ? ceil_div(over, B) : 0;
            push(s, ne++, r, new_tokens, pf);
        }
        if (!pf) {
            if (ndec > budget) return 0;  /* a decode would not be scheduled */
            budget -= ndec;
        }
    }
    if (need > C(FREE_BLOCKS)) return 0;  /* the exact loop would evict */
    for (i64 j = 0; j < ne; j++) {
        i64 r = Q(Q_BATCH_REQ, j);
        i64 over = REQ(r, COMPUTED) + Q(Q_BATCH_NEW, j) - (REQ(r, BLOCKS) + REQ(r, SHARED)) * B;
        if (over > 0) REQ(r, BLOCKS) += (i32)ceil_div(over, B);
    }
    C(FREE_BLOCKS) -= need;
    C(ALLOCATED) += need;
    C(BUDGET) = budget;
    C(PREFILL_BUDGET) = pbudget;
    s->boff = s->n_lazy;
    C(N_BATCH) = s->n_lazy + ne;
    admit_waiting(s, step);
    /* the record: the lazy decodes as a count and a context sum, the rest entry by entry */
    i64 nl = s->n_lazy;
    Sums m = {0, 0, 0, nl, s->sum_c + nl, nl};
    i64 b = step & s->hmask, fin_c = 0;
    for (i64 r = s->fin[b]; r >= 0;) {
        i64 nx = s->nxt[r];
        s->cls[mod_b(s->t0[r] - REQ(r, COMPUTED), B)] -= 1;
        materialise(s, r, step + 1);
        fin_c += REQ(r, COMPUTED);
        release(s, r);
        REQ(r, FINISH_STEP) = step;
        C(DONE) += 1;
        C(N_RUNNING) -= 1;
        s->n_lazy -= 1;
        r = nx;
    }
    s->fin[b] = -1;
    s->sum_c += nl - fin_c;  /* the survivors' contexts, one token on */
    for (i64 j = 0; j < C(N_BATCH) - s->boff; j++)
        if (record_entry(s, j, step, &m)) C(N_RUNNING) -= 1;
    write_row(s, row, &m);
    /* the exact requests: drop the finished, make the new tight decodes lazy from step + 1 */
    i64 k = 0;
    for (i64 e = 0; e < s->nex; e++) {
        i64 r = s->ex[e];
        if (REQ(r, FINISH_STEP) < 0 && !make_lazy(s, r, step + 1)) s->ex[k++] = r;
    }
    s->nex = k;
    s->boff = 0;
    return 1;
}

/* Steps from *step_io until every request finished (STATUS_OK), the loop is stuck or out of
 * steps, the record `rec` is full (STATUS_FULL: grow it, or hand its rows on and reuse it, and
 * call again) or the step reaches pause_step (STATUS_PAUSED: call again; lets the caller handle
 * Ctrl-C). `rec` holds steps base .. base + cap - 1 (row step - base), so a caller may price
 * and drop the rows of finished steps between calls. The whole state lives in the arrays, so a
 * call resumes exactly where the last one stopped. */
i64 tk_run(const i64 *kp, i32 *req, i64 n, i32 *grp, i32 *q, i64 w, i64 *c, i64 *rec,
           i64 base, i64 cap, i64 *step_io, i64 fast, i64 max_steps, i64 pause_step,
           i64 *inc, i64 *lz, i64 hsize, i32 *aux) {
    State st = { kp, req, grp, q, c, n, w, 0, 0, aux, aux + n, lz, hsize - 1, lz + hsize,
                 lz + hsize + kp[K_BLOCK_SIZE], 0, lz + hsize + kp[K_BLOCK_SIZE] + 2 * w + 2, 0,
                 0, 0 };
    State *s = &st;
    i64 step = *step_io, status = STATUS_OK;
    /* lazy decodes where the loop is fast (V0's prompt-first, unchunked steps stay exact) */
    int use_lazy = fast && K(K_CHUNKED_PREFILL) && !K(K_PREFILL_FIRST);
    if (use_lazy) enter_lazy(s, step);
    while (C(DONE) < n) {
        if (step >= max_steps) { status = STATUS_MAX_STEPS; break; }
        if (step - base >= cap) { status = STATUS_FULL; break; }
        if (step >= pause_step) { status = STATUS_PAUSED; break; }
        begin_step(s);
        i64 *row = rec + (step - base) * N_COLS;
        if (s->lazy) {
            if (fast_step(s, row, step)) { step++; continue; }
            leave_lazy(s, step);
        }
        i64 nrun_start = C(N_RUNNING);
        if (K(K_PREFILL_FIRST)) admit_waiting(s, step);  /* V0: a step of prompts, no decodes */
        if (C(N_BATCH) == 0) {
            schedule_running(s);
            if (C(N_PREEMPTED) == 0 && !K(K_PREFILL_FIRST)) admit_waiting(s, step);
        }
        if (C(N_BATCH) == 0) { status = STATUS_STUCK; break; }
        int any_done = record_step(s, row, step);
        step++;
        if (use_lazy)
            enter_lazy(s, step);
        else if (fast && row[PREFILL_TOKENS] == 0 && C(N_PREEMPTED) == 0 && !any_done
                 && C(N_BATCH) == nrun_start && C(N_RUNNING) > 0)
            step = skip_decodes(s, rec, base, cap, step, max_steps, inc);
    }
    if (s->lazy) leave_lazy(s, step);
    *step_io = step;
    return status;
}

/* First fit of `sizes` (already in packing order) into bins of `capacity` holding at most
 * `max_items` each. A max segment tree over the bins' free space finds the first bin with room
 * in O(log n); an item larger than `capacity` gets a bin of its own. Writes each item's bin.
 * tree: 2 * size entries, count: size entries, size = the smallest power of two >= n. */
void tk_first_fit(const i64 *sizes, i64 n, i64 capacity, i64 max_items, i64 size, i64 *tree,
                  i64 *count, i64 *bin_of) {
    for (i64 i = 0; i < 2 * size; i++) tree[i] = -1;  /* -1: bin not opened / full */
    memset(count, 0, (size_t)size * sizeof(i64));
    i64 opened = 0;
    for (i64 k = 0; k < n; k++) {
        i64 sz = sizes[k], node, b;
        if (tree[1] >= sz) {
            node = 1;
            while (node < size) node = tree[2 * node] >= sz ? 2 * node : 2 * node + 1;
            b = node - size;
        } else {
            b = opened++;
            node = b + size;
            tree[node] = capacity;
        }
        bin_of[k] = b;
        count[b] += 1;
        i64 left = tree[node] - sz;
        tree[node] = (left >= 0 && count[b] < max_items) ? left : -1;
        for (node /= 2; node >= 1; node /= 2) {
            i64 a = tree[2 * node], cc = tree[2 * node + 1];
            tree[node] = a > cc ? a : cc;
        }
    }
}

/* Weighted fair merge of the left scanner (flat positions 0, 1, ...) and the right scanner
 * (n-1, n-2, ...) of BlendServe's dual scan. Each side advances a virtual clock by weight /
 * share, where share is its memory fraction from BlendServe's partition for the two nodes the
 * scanners stand on; the side with the earlier clock emits the next `chunk` requests (and, with
 * `whole_nodes`, the rest of the node it is in). Writes (positions, side). */
void tk_dual_scan(const i64 *unit_of, i64 n, const double *rho_unit, const double *weight,
                  double rho_target, i64 chunk, i64 whole_nodes, i64 *out, int8_t *side) {
    i64 li = 0, ri = n - 1, k = 0;
    double vl = 0.0, vr = 0.0;
    while (li <= ri) {
        double rl = rho_unit[unit_of[li]], rr = rho_unit[unit_of[ri]], frac;
        if (unit_of[li] == unit_of[ri]) frac = 1.0;  /* both inside one node: left to right */
        else if (rl == rr) frac = 0.5;
        else frac = (rho_target - rr) / (rl - rr);
        if (frac < 0.0) frac = 0.0;
        if (frac > 1.0) frac = 1.0;
        if (frac > 0.0 && (frac == 1.0 || vl <= vr)) {
            for (i64 e = 0; li <= ri
                     && (e < chunk || (whole_nodes && li > 0 && unit_of[li] == unit_of[li - 1]));
                 e++) {
                out[k] = li;
                side[k] = 0;
                vl += weight[li] / frac;
                li++;
                k++;
            }
            if (frac == 1.0 && vr < vl) vr = vl;  /* an idle side resumes now, not in a burst */
        } else {
            for (i64 e = 0; li <= ri
                     && (e < chunk || (whole_nodes && ri < n - 1 && unit_of[ri] == unit_of[ri + 1]));
                 e++) {
                out[k] = ri;
                side[k] = 1;
                vr += weight[ri] / (1.0 - frac);
                ri--;
                k++;
            }
            if (frac == 0.0 && vl < vr) vl = vr;
        }
    }
}

/* Greedy LPT split of an offline batch over `dp` replicas: items in `by_size` order (largest
 * work first) each go to the replica with the least work so far (the lowest-numbered on a tie,
 * as numpy's argmin). Writes each item's replica; load: dp entries of scratch. */
void tk_least_loaded(const i64 *work, const i64 *by_size, i64 n, i64 dp, i64 *load,
                     i64 *owner) {
    memset(load, 0, (size_t)dp * sizeof(i64));
    for (i64 k = 0; k < n; k++) {
        i64 pos = by_size[k], r = 0;
        for (i64 j = 1; j < dp; j++)
            if (load[j] < load[r]) r = j;
        owner[pos] = r;
        load[r] += work[pos];
    }
}

/* ---- SGLang v0.5's scheduler ----------------------------------------------------------------
 * The C form of tuner/sim/sglang.py's SGLangScheduler (the reference, whose docstrings cite
 * SGLang's source for every rule below): same state, same order of operations, same floats
 * (new_token_ratio and the admission offset are doubles computed in the same order as the
 * Python's), so the step records are equal bit for bit (tests/test_sglang_c.py). Each function
 * names the SGLang routine and the Python method it mirrors. */

/* req[r * SG_N_REQ_COLS + col], 32-bit as the vLLM loop's */
enum { SG_PROMPT, SG_OUTPUT, SG_GROUP, SG_COMPUTED, SG_SHARED, SG_GENERATED, SG_FINISH_STEP,
       SG_FIRST_STEP, SG_N_REQ_COLS };
/* grp[g * SG_N_GRP_COLS + col]: one radix-cache entry per prefix group; the unused cached ones
 * form the LRU list (a doubly linked list through PREV/NEXT, oldest at c[SG_LRU_HEAD]) */
/* GWAIT: the group's members in the waiting queue (dfs-weight's sort is skipped while the
 * queue is known to be in its order) */
enum { SG_GLEN, SG_CACHED, SG_REF, SG_IN_LRU, SG_PREV, SG_NEXT, SG_SEEN, SG_GWAIT,
       SG_N_GRP_COLS };
/* q[row * w + i]: running (admission order), the batch's requests and tokens (w entries each,
 * w = min(n, max_running) + 1), then the waiting queue (a circular deque of n) */
enum { SG_Q_RUNNING, SG_Q_BATCH_REQ, SG_Q_BATCH_NEW, SG_Q_WAITING, SG_N_Q_ROWS };
/* scalar state c[] (f[0] holds new_token_ratio); WAIT_CACHED: waiting requests whose group is
 * cached; DFS_DIRTY: the waiting queue may not be in dfs-weight's order */
enum { SG_N_RUNNING, SG_WAIT_HEAD, SG_N_WAITING, SG_CHUNKED, SG_BATCH_FULL, SG_RESET_PENDING,
       SG_DONE, SG_PRIVATE, SG_CACHE_TOKENS, SG_EVICTABLE, SG_CACHED_TOKENS, SG_LRU_HEAD,
       SG_LRU_TAIL, SG_WAIT_CACHED, SG_DFS_DIRTY, SG_N_SLOTS };
/* parameters kp[] (kf[]: the ratio's decay per step and its floor) */
enum { SGK_CAPACITY, SGK_CHUNK, SGK_MAX_RUNNING, SGK_MAX_PREFILL, SGK_RADIX, SGK_POLICY,
       SGK_CLIP_MAX_NEW, SGK_RETRACT_STEPS, SGK_LPM_MAX_WAITING, SGK_IN_BATCH_THRESHOLD,
       SGK_PAGE, SGK_MAX_ROWS, SGK_N_PARAMS };
enum { SGF_DECAY, SGF_MIN_RATIO, SGF_N_PARAMS };
/* a running list longer than its row (impossible: running + chunked <= max_running), or a
 * scratch smaller than the page + 1 */
enum { STATUS_OVERFLOW = 5 };
/* 2: SGK_POLICY holds a policy code; 3: GWAIT, WAIT_CACHED; 4: KV held in whole pages;
 * 5: retraction as sglang >= 0.5.2 (next decode's pages, release_req's eviction), prompts
 * charged and cut in whole pages */
enum { SG_ABI_VERSION = 5 };
enum { SG_POLICY_FCFS, SG_POLICY_LPM, SG_POLICY_DFS_WEIGHT };

i64 tk_sglang_layout(i64 *out, i64 size) {
    const i64 v[] = { SG_N_REQ_COLS, SG_PROMPT, SG_OUTPUT, SG_GROUP, SG_FINISH_STEP,
                      SG_FIRST_STEP, SG_N_GRP_COLS, SG_GLEN, SG_PREV, SG_NEXT, SG_N_Q_ROWS,
                      SG_Q_WAITING, SG_N_SLOTS, SG_N_WAITING, SG_CHUNKED, SG_CACHED_TOKENS,
                      SG_LRU_HEAD, SG_LRU_TAIL, SGK_N_PARAMS, SGK_MAX_ROWS, SGF_N_PARAMS,
                      STATUS_FULL, STATUS_PAUSED, STATUS_OVERFLOW, SG_GWAIT, SG_WAIT_CACHED,
                      SG_DFS_DIRTY, SG_ABI_VERSION };
    i64 n = (i64)(sizeof v / sizeof v[0]);
    for (i64 i = 0; i < n && i < size; i++) out[i] = v[i];
    return n;
}

typedef struct {
    const i64 *k;
    const double *kf;
    i32 *req, *grp, *q;
    i64 *c;
    double *f;
    i64 n, w, ws;
    i64 *scratch;  /* 4 x ws: sort keys, values and their merge buffers */
} SgState;

#define SR(r, col) s->req[(r) * SG_N_REQ_COLS + (col)]
#define SG(g, col) s->grp[(g) * SG_N_GRP_COLS + (col)]
#define SQ(row, i) s->q[(row) * s->w + (i)]
#define SW(i) s->q[SG_Q_WAITING * s->w + (i)]
#define SC(slot) s->c[slot]
#define SK(p) s->k[p]

/* ---- KV (SGLangScheduler.available, _evict, _alloc, _lock, _unlock, _release, _insert) ---- */
static inline i64 sg_available(const SgState *s) {
    return SK(SGK_CAPACITY) - SC(SG_PRIVATE) - SC(SG_CACHE_TOKENS);
}

/* Group g was cached (+1) or evicted (-1): its waiting members count as cached or not, and a
 * waiting member moves in dfs-weight's order. */
static inline void sg_group_cached_changed(SgState *s, i64 g, i64 sign) {
    SC(SG_WAIT_CACHED) += sign * SG(g, SG_GWAIT);
    if (SG(g, SG_GWAIT) > 0) SC(SG_DFS_DIRTY) = 1;
}

/* r joins (+1) or leaves (-1) the waiting queue: its group's count of waiting members. */
static inline void sg_waiting_changed(SgState *s, i64 r, i64 sign) {
    i64 g = SR(r, SG_GROUP);
    if (g < 0) return;
    SG(g, SG_GWAIT) += (i32)sign;
    if (SG(g, SG_CACHED)) SC(SG_WAIT_CACHED) += sign;
}

static void sg_lru_remove(SgState *s, i64 g) {  /* OrderedDict.pop(g, None) */
    if (!SG(g, SG_IN_LRU)) return;
    i64 p = SG(g, SG_PREV), nx = SG(g, SG_NEXT);
    if (p >= 0) SG(p, SG_NEXT) = (i32)nx; else SC(SG_LRU_HEAD) = nx;
    if (nx >= 0) SG(nx, SG_PREV) = (i32)p; else SC(SG_LRU_TAIL) = p;
    SG(g, SG_IN_LRU) = 0;
}

static void sg_lru_append(SgState *s, i64 g) {  /* lru[g] = None: most recent (kept if there) */
    if (SG(g, SG_IN_LRU)) return;
    i64 t = SC(SG_LRU_TAIL);
    SG(g, SG_PREV) = (i32)t;
    SG(g, SG_NEXT) = -1;
    if (t >= 0) SG(t, SG_NEXT) = (i32)g; else SC(SG_LRU_HEAD) = g;
    SC(SG_LRU_TAIL) = g;
    SG(g, SG_IN_LRU) = 1;
}

/* The least recently used unused entry, taken out of the cache (RadixCache.evict); -1: none. */
static i64 sg_evict_oldest(SgState *s) {
    i64 g = SC(SG_LRU_HEAD);
    if (g < 0) return -1;
    sg_lru_remove(s, g);
    SG(g, SG_CACHED) = 0;
    sg_group_cached_changed(s, g, -1);
    return g;
}

static void sg_evict(SgState *s, i64 need) {
    while (sg_available(s) < need && SC(SG_LRU_HEAD) >= 0) {
        i64 g = sg_evict_oldest(s);
        SC(SG_CACHE_TOKENS) -= SG(g, SG_GLEN);
        SC(SG_EVICTABLE) -= SG(g, SG_GLEN);
    }
}

static int sg_alloc(SgState *s, i64 tokens) {  /* 0: it cannot be placed (stuck) */
    sg_evict(s, tokens);
    if (sg_available(s) < tokens) return 0;
    SC(SG_PRIVATE) += tokens;
    return 1;
}

static void sg_lock(SgState *s, i64 g) {
    if (SG(g, SG_REF) == 0) {
        sg_lru_remove(s, g);
        SC(SG_EVICTABLE) -= SG(g, SG_GLEN);
    }
    SG(g, SG_REF) += 1;
}

static void sg_unlock(SgState *s, i64 g) {
    SG(g, SG_REF) -= 1;
    if (SG(g, SG_REF) == 0 && SG(g, SG_CACHED)) {
        sg_lru_append(s, g);
        SC(SG_EVICTABLE) += SG(g, SG_GLEN);
    }
}

/* _paged: the pool tokens `tokens` KV tokens occupy, whole pages (the last partly filled) */
static inline i64 sg_paged(const SgState *s, i64 tokens) {
    i64 page = SK(SGK_PAGE);
    return page == 1 ? tokens : (tokens + page - 1) / page * page;
}

static void sg_release(SgState *s, i64 r) {
    SC(SG_PRIVATE) -= sg_paged(s, SR(r, SG_COMPUTED)) - SR(r, SG_SHARED);
    if (SR(r, SG_SHARED) > 0) sg_unlock(s, SR(r, SG_GROUP));
    SR(r, SG_COMPUTED) = 0;
    SR(r, SG_SHARED) = 0;
}

static void sg_insert(SgState *s, i64 r) {
    i64 g = SR(r, SG_GROUP);
    if (g < 0 || SR(r, SG_SHARED) > 0 || SR(r, SG_COMPUTED) < SG(g, SG_GLEN)) return;
    i64 x = SG(g, SG_GLEN);
    SC(SG_PRIVATE) -= x;
    SR(r, SG_SHARED) = (i32)x;
    if (SG(g, SG_CACHED)) {  /* computed twice: r's copy is freed, r locks the cached one */
        sg_lock(s, g);
        return;
    }
    SG(g, SG_CACHED) = 1;
    sg_group_cached_changed(s, g, 1);
    SC(SG_CACHE_TOKENS) += x;
    SG(g, SG_REF) += 1;
}

static inline i64 sg_hit(const SgState *s, i64 r) {  /* _hit: the cached prefix r can skip */
    i64 g = SR(r, SG_GROUP), page = SK(SGK_PAGE);
    if (g < 0 || !SG(g, SG_CACHED)) return 0;
    i64 held = (i64)SR(r, SG_PROMPT) + SR(r, SG_GENERATED) - 1;  /* whole pages of it */
    return min64(SG(g, SG_GLEN), page == 1 ? held : held / page * page);
}

/* Stable ascending sort of m (key, value) pairs in scratch[0..m), scratch[ws..ws+m) (bottom-up
 * merge sort: Python's sorted keeps equal keys in order too). */
static void sg_sort(SgState *s, i64 m) {
    i64 *key = s->scratch, *val = s->scratch + s->ws;
    i64 *tk = s->scratch + 2 * s->ws, *tv = s->scratch + 3 * s->ws;
    for (i64 width = 1; width < m; width *= 2) {
        for (i64 lo = 0; lo < m; lo += 2 * width) {
            i64 mid = min64(lo + width, m), hi = min64(lo + 2 * width, m);
            i64 a = lo, b = mid, o = lo;
            while (a < mid && b < hi) {
                if (key[b] < key[a]) { tk[o] = key[b]; tv[o++] = val[b++]; }
                else { tk[o] = key[a]; tv[o++] = val[a++]; }
            }
            while (a < mid) { tk[o] = key[a]; tv[o++] = val[a++]; }
            while (b < hi) { tk[o] = key[b]; tv[o++] = val[b++]; }
        }
        i64 *t = key; key = tk; tk = t;
        t = val; val = tv; tv = t;
    }
    if (key != s->scratch) {  /* an odd number of passes: the result is in the buffers */
        memcpy(s->scratch, key, (size_t)m * sizeof(i64));
        memcpy(s->scratch + s->ws, val, (size_t)m * sizeof(i64));
    }
}

/* ---- prefill (get_new_batch_prefill, PrefillAdder; _sort_lpm, _prefill_batch, _run_prefill) */

/* --schedule-policy lpm with few requests waiting: longest cached prefix first, a later member
 * of a group not cached yet moved last (in-batch prefix caching). */
static void sg_sort_lpm(SgState *s) {
    i64 m = SC(SG_N_WAITING), head = SC(SG_WAIT_HEAD), n = s->n;
    i64 thr = SK(SGK_IN_BATCH_THRESHOLD);
    i64 *key = s->scratch, *val = s->scratch + s->ws;
    for (i64 i = 0; i < m; i++) {
        i64 r = SW((head + i) % n), hit = sg_hit(s, r), g = SR(r, SG_GROUP);
        key[i] = -hit;
        val[i] = r;
        if (hit <= thr && g >= 0 && SG(g, SG_GLEN) > thr) {
            if (SG(g, SG_SEEN)) key[i] = INT64_MAX;
            else SG(g, SG_SEEN) = 1;
        }
    }
    for (i64 i = 0; i < m; i++) {
        i64 g = SR(val[i], SG_GROUP);
        if (g >= 0) SG(g, SG_SEEN) = 0;
    }
    sg_sort(s, m);
    for (i64 i = 0; i < m; i++) SW((head + i) % n) = (i32)s->scratch[s->ws + i];
}

/* --schedule-policy dfs-weight (the whole queue, ws > n): the waiting requests of the cached
 * group with the most of them first, equal counts by group id, then the next group's, then the
 * uncached ones, each in queue order (_sort_dfs_weight). A counting sort over the groups' counts
 * of waiting members (GWAIT): SG_SEEN marks a group gathered, then holds its next slot, and is
 * 0 again at the end. */
static void sg_sort_dfs_weight(SgState *s) {
    i64 m = SC(SG_N_WAITING), head = SC(SG_WAIT_HEAD), n = s->n, k = 0, pos = 0;
    i64 *key = s->scratch, *val = s->scratch + s->ws, *out = s->scratch + 2 * s->ws;
    for (i64 i = 0; i < m; i++) {
        i64 g = SR(SW((head + i) % n), SG_GROUP);
        if (g >= 0 && SG(g, SG_CACHED) && !SG(g, SG_SEEN)) {
            key[k] = g - ((i64)SG(g, SG_GWAIT) << 32);  /* most members first, then lower id */
            val[k++] = g;
            SG(g, SG_SEEN) = 1;
        }
    }
    sg_sort(s, k);
    for (i64 j = 0; j < k; j++) {
        i64 g = val[j];
        SG(g, SG_SEEN) = (i32)pos;
        pos += SG(g, SG_GWAIT);
    }
    for (i64 i = 0; i < m; i++) {
        i64 r = SW((head + i) % n), g = SR(r, SG_GROUP);
        if (g >= 0 && SG(g, SG_CACHED)) out[SG(g, SG_SEEN)++] = r;
        else out[pos++] = r;
    }
    for (i64 i = 0; i < m; i++) {
        i64 g = SR(out[i], SG_GROUP);
        if (g >= 0) SG(g, SG_SEEN) = 0;
        SW((head + i) % n) = (i32)out[i];
    }
}

/* After admitting a prefix of a queue in dfs-weight's order, only the group now at its head
 * can have fewer waiting members than before: the order still holds unless the next group's
 * block now comes first (more members, or as many and a lower id). */
static void sg_dfs_check_head(SgState *s) {
    i64 m = SC(SG_N_WAITING), n = s->n;
    if (m == 0) return;
    i64 hd = SC(SG_WAIT_HEAD), g = SR(SW(hd), SG_GROUP);
    if (g < 0 || !SG(g, SG_CACHED)) return;  /* in order: no cached group's member waits */
    i64 cnt = SG(g, SG_GWAIT);
    if (cnt >= m) return;
    i64 g2 = SR(SW((hd + cnt) % n), SG_GROUP);
    if (g2 < 0 || !SG(g2, SG_CACHED)) return;
    i64 cnt2 = SG(g2, SG_GWAIT);
    if (cnt2 > cnt || (cnt2 == cnt && g2 < g)) SC(SG_DFS_DIRTY) = 1;
}

/* rem_total_token_offset of the running batch: sum of min(max_new - generated, clip) x ratio */
static double sg_running_offset(const SgState *s) {
    if (SC(SG_N_RUNNING) == 0) return 0.0;
    i64 sum = 0, clip = SK(SGK_CLIP_MAX_NEW);
    for (i64 i = 0; i < SC(SG_N_RUNNING); i++) {
        i64 r = SQ(SG_Q_RUNNING, i);
        sum += min64((i64)SR(r, SG_OUTPUT) - SR(r, SG_GENERATED), clip);
    }
    return (double)sum * s->f[0];
}

/* The next prefill batch into the batch rows; returns its size (0: none). */
static i64 sg_prefill_batch(SgState *s, i64 step) {
    i64 n = s->n, page = SK(SGK_PAGE), clip = SK(SGK_CLIP_MAX_NEW);
    if ((SC(SG_BATCH_FULL) || SC(SG_N_WAITING) == 0) && SC(SG_CHUNKED) < 0) return 0;
    i64 allocatable = SK(SGK_MAX_RUNNING) - SC(SG_N_RUNNING);
    if (allocatable <= 0 && SC(SG_CHUNKED) < 0) {
        SC(SG_BATCH_FULL) = 1;
        return 0;
    }
    if (SK(SGK_POLICY) == SG_POLICY_LPM && SC(SG_N_WAITING) <= SK(SGK_LPM_MAX_WAITING))
        sg_sort_lpm(s);
    else if (SK(SGK_POLICY) == SG_POLICY_DFS_WEIGHT) {
        /* with no cached group's member waiting the order is the queue's own; else the sort
         * runs only where the queue may have left it (tuner's shortcut: the same order) */
        if (SC(SG_DFS_DIRTY) && SC(SG_WAIT_CACHED) > 0) sg_sort_dfs_weight(s);
        SC(SG_DFS_DIRTY) = 0;
    }
    double offset = sg_running_offset(s);
    i64 cur_offset = 0, rem_input = SK(SGK_MAX_PREFILL), rem_chunk = SK(SGK_CHUNK);
    i64 nb = 0, new_chunked = -1;
    /* what a request takes of the budgets (PrefillAdder._update_prefill_budget) */
    /* the extend in whole pages, for the KV and compute budgets alike (ceil_paged_tokens) */
#define SG_CHARGE(ext, max_new) do {                                   \
        i64 ext_paged_ = sg_paged(s, (ext));                           \
        offset += (double)(ext_paged_ + (max_new) + page);             \
        cur_offset += ext_paged_ + page;                               \
        rem_input -= ext_paged_;                                       \
        rem_chunk -= ext_paged_;                                       \
    } while (0)
    if (SC(SG_CHUNKED) >= 0) {  /* add_chunked_req: the chunked request's next chunk */
        i64 r = SC(SG_CHUNKED);
        i64 rem = min64(rem_chunk,
                        (i64)((double)(sg_available(s) + SC(SG_EVICTABLE)) - offset));
        if (rem <= 0) rem = rem_chunk;
        i64 left = (i64)SR(r, SG_PROMPT) + SR(r, SG_GENERATED) - SR(r, SG_COMPUTED);
        i64 new_len = min64(left, rem);
        SQ(SG_Q_BATCH_REQ, nb) = (i32)r;
        SQ(SG_Q_BATCH_NEW, nb) = (i32)new_len;
        nb++;
        int truncated = left > rem;
        i64 max_new = truncated ? 0
                                : min64((i64)SR(r, SG_OUTPUT) - SR(r, SG_GENERATED), clip);
        SG_CHARGE(new_len, max_new);
        if (truncated) new_chunked = r;
    }
    i64 admitted = 0, head = SC(SG_WAIT_HEAD), nw = SC(SG_N_WAITING);
    for (i64 i = 0; i < nw; i++) {  /* add_one_req, waiting requests in queue order */
        i64 r = SW((head + i) % n);
        if (nb >= allocatable) {
            SC(SG_BATCH_FULL) = 1;
            break;
        }
        i64 hit = sg_hit(s, r);
        i64 ext = (i64)SR(r, SG_PROMPT) + SR(r, SG_GENERATED) - hit;
        i64 max_new = min64(max64((i64)SR(r, SG_OUTPUT) - SR(r, SG_GENERATED), 0), clip);
        i64 total = ext + max_new + page;
        if ((double)total >= (double)(sg_available(s) + SC(SG_EVICTABLE)) - offset) {
            SC(SG_BATCH_FULL) = 1;  /* NO_TOKEN */
            break;
        }
        i64 g = SR(r, SG_GROUP);
        if (hit > 0) {  /* the match is locked: no longer evictable */
            sg_lock(s, g);
            if ((double)total >= (double)(sg_available(s) + SC(SG_EVICTABLE)) - offset) {
                sg_unlock(s, g);
                SC(SG_BATCH_FULL) = 1;
                break;
            }
        }
        if (sg_paged(s, ext) <= rem_chunk) {  /* fits whole (_select_prefill_admission) */
            SQ(SG_Q_BATCH_REQ, nb) = (i32)r;
            SQ(SG_Q_BATCH_NEW, nb) = (i32)ext;
            nb++;
            SG_CHARGE(ext, max_new);
        } else {  /* longer than the chunk left: cut at a page multiple, the rest later */
            i64 x = rem_chunk / page * page;  /* hit is whole pages: the cut ends on one */
            if (x <= 0) {
                if (hit > 0) sg_unlock(s, g);
                break;  /* OTHER */
            }
            SQ(SG_Q_BATCH_REQ, nb) = (i32)r;
            SQ(SG_Q_BATCH_NEW, nb) = (i32)x;
            nb++;
            new_chunked = r;
            SG_CHARGE(x, 0);
        }
        admitted++;
        sg_waiting_changed(s, r, -1);
        SR(r, SG_COMPUTED) = (i32)hit;
        SR(r, SG_SHARED) = (i32)hit;
        SC(SG_CACHED_TOKENS) += hit;
        if (SR(r, SG_FIRST_STEP) < 0) SR(r, SG_FIRST_STEP) = (i32)step;
        i64 fr = sg_available(s) + SC(SG_EVICTABLE);
        if ((double)fr - offset <= 0 || fr - cur_offset <= 0) {
            SC(SG_BATCH_FULL) = 1;  /* budget_state NO_TOKEN */
            break;
        }
        if (rem_input <= 0 || rem_chunk <= 0) break;  /* OTHER */
    }
    if (admitted) {  /* admitted in queue order: a prefix of it */
        SC(SG_WAIT_HEAD) = (head + admitted) % n;
        SC(SG_N_WAITING) -= admitted;
        if (SK(SGK_POLICY) == SG_POLICY_DFS_WEIGHT) sg_dfs_check_head(s);
    }
    if (nb == 0) return 0;
    SC(SG_CHUNKED) = new_chunked;
    return nb;
#undef SG_CHARGE
}

/* Run the batch: allocate and compute each chunk, insert the computed group prefixes, sample
 * where a prompt completes; writes the step's row. Returns STATUS_OK, STATUS_STUCK (KV cannot
 * hold a chunk) or STATUS_OVERFLOW. */
static i64 sg_run_prefill(SgState *s, i64 nb, i64 step, i64 *row) {
    i64 pf = 0, sq = 0, ctx = 0, sampled = 0, nfin = 0;
    for (i64 j = 0; j < nb; j++) {
        i64 r = SQ(SG_Q_BATCH_REQ, j), ext = SQ(SG_Q_BATCH_NEW, j);
        i64 c0 = SR(r, SG_COMPUTED);
        if (!sg_alloc(s, sg_paged(s, c0 + ext) - sg_paged(s, c0))) return STATUS_STUCK;
        pf += ext;
        sq += ext * ext;
        ctx += ext * c0;
        SR(r, SG_COMPUTED) = (i32)(c0 + ext);
        if (SK(SGK_RADIX)) sg_insert(s, r);
        if (SR(r, SG_COMPUTED) == (i64)SR(r, SG_PROMPT) + SR(r, SG_GENERATED)) {
            SR(r, SG_GENERATED) += 1;  /* its last chunk: a token */
            sampled++;
            if (SR(r, SG_GENERATED) >= SR(r, SG_OUTPUT)) {
                SQ(SG_Q_BATCH_REQ, nfin++) = (i32)r;  /* finished (nfin <= j: read already) */
            } else if (r != SC(SG_CHUNKED)) {
                if (SC(SG_N_RUNNING) >= s->w) return STATUS_OVERFLOW;
                SQ(SG_Q_RUNNING, SC(SG_N_RUNNING)) = (i32)r;
                SC(SG_N_RUNNING) += 1;
            }
        }
    }
    for (i64 j = 0; j < nfin; j++) {
        i64 r = SQ(SG_Q_BATCH_REQ, j);
        sg_release(s, r);
        SR(r, SG_FINISH_STEP) = (i32)step;
        SC(SG_DONE) += 1;
    }
    memset(row, 0, N_COLS * sizeof(i64));
    row[PREFILL_TOKENS] = pf;
    row[PREFILL_SQ] = sq;
    row[PREFILL_CTX] = ctx;
    row[SAMPLED] = sampled;
    row[KV_BLOCKS] = SC(SG_PRIVATE) + SC(SG_CACHE_TOKENS);
    row[RUNNING] = SC(SG_N_RUNNING) + (SC(SG_CHUNKED) >= 0);
    return STATUS_OK;
}

/* ---- decode (update_running_batch, retract_decode; _retract, _decode) ---------------------- */

/* _full_pages: running requests whose pages are full (a new page at their next decode) */
static i64 sg_full_pages(const SgState *s) {
    i64 full = 0, page = SK(SGK_PAGE);
    if (page == 1) return SC(SG_N_RUNNING);
    for (i64 i = 0; i < SC(SG_N_RUNNING); i++)
        full += SR(SQ(SG_Q_RUNNING, i), SG_COMPUTED) % page == 0;
    return full;
}

/* pages(j), the new pages decode steps 1..j take (as _decode): a running request with offset
 * o = -computed mod page takes one at steps o + 1, o + 1 + page, ...; pc[m] (m <= page): the
 * requests with offset < m, so pages(j) = running (j / page) + pc[j % page], and pc[1] the
 * requests whose pages are full (all of them at page 1) */
static void sg_page_offsets(const SgState *s, i64 *pc) {
    i64 page = SK(SGK_PAGE);
    for (i64 m = 0; m <= page; m++) pc[m] = 0;
    if (page == 1) {  /* no division per request */
        pc[1] = SC(SG_N_RUNNING);
        return;
    }
    for (i64 i = 0; i < SC(SG_N_RUNNING); i++)
        pc[(page - SR(SQ(SG_Q_RUNNING, i), SG_COMPUTED) % page) % page + 1] += 1;
    for (i64 m = 1; m <= page; m++) pc[m] += pc[m - 1];
}

/* Retract running requests, fewest output tokens first (the longest prompt among equals, the
 * most recently admitted among exact ties, as Python's stable reverse sort pops them): at least
 * one out, then more until the rest's next decode has its pages (sglang >= 0.5.2's
 * check_decode_mem), one kept; each one out evicts unused cached prefixes until RETRACT_STEPS
 * x the requests still kept are free (release_req). Returns how many. */
static i64 sg_retract(SgState *s) {
    i64 nrun = SC(SG_N_RUNNING), n = s->n, steps = SK(SGK_RETRACT_STEPS), page = SK(SGK_PAGE);
    i64 full = sg_full_pages(s);
    i64 *key = s->scratch, *val = s->scratch + s->ws;
    for (i64 i = 0; i < nrun; i++) {  /* reversed: equal keys pop the latest admitted first */
        i64 r = SQ(SG_Q_RUNNING, nrun - 1 - i);
        key[i] = ((i64)SR(r, SG_GENERATED) << 32) | (i64)(INT32_MAX - SR(r, SG_PROMPT));
        val[i] = r;
    }
    sg_sort(s, nrun);
    i64 out = 0, kept = nrun;
    while (kept > 0 && (out == 0 || sg_available(s) + SC(SG_EVICTABLE) < page * full)) {
        if (kept == 1) break;
        i64 r = s->scratch[s->ws + out];
        full -= SR(r, SG_COMPUTED) % page == 0;
        sg_release(s, r);
        sg_evict(s, steps * (kept - 1));  /* release_req's evict_from_tree_cache */
        SW((SC(SG_WAIT_HEAD) + SC(SG_N_WAITING)) % n) = (i32)r;
        SC(SG_N_WAITING) += 1;
        sg_waiting_changed(s, r, 1);
        SC(SG_DFS_DIRTY) = 1;
        out++;
        kept--;
    }
    /* the retracted hold no KV any more (computed 0); a running request has computed >= 1 */
    i64 j = 0, sum_gen = 0, sum_out = 0;
    for (i64 i = 0; i < nrun; i++) {
        i64 r = SQ(SG_Q_RUNNING, i);
        if (SR(r, SG_COMPUTED) > 0) {
            SQ(SG_Q_RUNNING, j++) = (i32)r;
            sum_gen += SR(r, SG_GENERATED);
            sum_out += SR(r, SG_OUTPUT);
        }
    }
    SC(SG_N_RUNNING) = j;
    double ratio = (double)(sum_gen + steps * j) / (double)(sum_out + 1);
    s->f[0] = ratio < 1.0 ? ratio : 1.0;
    return out;
}

/* update_running_batch and one decode step, or (fast) the k decode-only steps up to the next
 * finish, KV shortage or step limit; writes rows rec[0..k). Returns STATUS_OK or STATUS_STUCK
 * and the steps taken in *k_out. */
static i64 sg_decode(SgState *s, i64 *rec, i64 step, i64 fast, i64 max_steps, i64 *k_out) {
    const double decay = s->kf[SGF_DECAY], floor_ratio = s->kf[SGF_MIN_RATIO];
    if (SC(SG_RESET_PENDING)) {
        SC(SG_BATCH_FULL) = 0;
        SC(SG_RESET_PENDING) = 0;
    }
    i64 bs = SC(SG_N_RUNNING), retracted = 0, page = SK(SGK_PAGE);
    i64 *pc = s->scratch;  /* page + 1 entries (ws > page); the retraction's sort reuses them */
    sg_page_offsets(s, pc);
    if (sg_available(s) + SC(SG_EVICTABLE) < page * pc[1]) {  /* check_decode_mem */
        retracted = sg_retract(s);
        SC(SG_BATCH_FULL) = 0;
        bs = SC(SG_N_RUNNING);
        sg_page_offsets(s, pc);
        if (sg_available(s) + SC(SG_EVICTABLE) < page * pc[1]) return STATUS_STUCK;
    } else {
        double r = s->f[0] - decay;
        s->f[0] = floor_ratio > r ? floor_ratio : r;
    }
    i64 sum_c = 0, left_min = INT64_MAX;
    for (i64 i = 0; i < bs; i++) {
        i64 r = SQ(SG_Q_RUNNING, i);
        sum_c += SR(r, SG_COMPUTED);
        left_min = min64(left_min, (i64)SR(r, SG_OUTPUT) - SR(r, SG_GENERATED));
    }
    i64 k = 1;
    if (fast && !retracted && SC(SG_CHUNKED) < 0
            && (SC(SG_BATCH_FULL) || SC(SG_N_WAITING) == 0)) {
        /* the following steps repeat this one until a request finishes or KV runs out: the
         * most steps whose pages the free pool holds (pages(j) <= free pages) */
        i64 free_pages = (sg_available(s) + SC(SG_EVICTABLE)) / page;
        i64 q = free_pages / bs, m = 0;
        while (m + 1 < page && pc[m + 1] <= free_pages - q * bs) m++;
        k = max64(1, min64(left_min, min64(q * page + m, max_steps - step)));
    }
    /* step j needs its pages free: unused cached prefixes are evicted (LRU) at the first step
     * that needs them, as check_decode_mem does step by step */
    i64 a0 = sg_available(s), evicted = 0, cache = SC(SG_CACHE_TOKENS), priv = SC(SG_PRIVATE);
    i64 need = 0;  /* tokens steps 1..j take */
    for (i64 j = 1; j <= k; j++) {
        need = page == 1 ? bs * j : page * (bs * (j / page) + pc[j % page]);
        while (a0 + evicted < need) {
            i64 g = sg_evict_oldest(s);
            if (g < 0) return STATUS_STUCK;
            cache -= SG(g, SG_GLEN);
            evicted += SG(g, SG_GLEN);
        }
        i64 *row = rec + (j - 1) * N_COLS;
        memset(row, 0, N_COLS * sizeof(i64));
        row[DECODES] = bs;
        row[DECODE_KV] = sum_c + bs * j;
        row[SAMPLED] = bs;
        row[KV_BLOCKS] = priv + need + cache;
        row[RUNNING] = bs;
    }
    SC(SG_CACHE_TOKENS) -= evicted;
    SC(SG_EVICTABLE) -= evicted;
    rec[PREEMPTED] = retracted;
    SC(SG_PRIVATE) += need;
    int any_done = 0;
    for (i64 i = 0; i < bs; i++) {
        i64 r = SQ(SG_Q_RUNNING, i);
        SR(r, SG_COMPUTED) += (i32)k;
        SR(r, SG_GENERATED) += (i32)k;
    }
    if (k > 1) {  /* the ratio decays once per step (the first decayed above) */
        double r = s->f[0] - (double)(k - 1) * decay;
        s->f[0] = floor_ratio > r ? floor_ratio : r;
    }
    for (i64 i = 0; i < bs; i++) {  /* finished: released in running order */
        i64 r = SQ(SG_Q_RUNNING, i);
        if (SR(r, SG_GENERATED) >= SR(r, SG_OUTPUT)) {
            sg_release(s, r);
            SR(r, SG_FINISH_STEP) = (i32)(step + k - 1);
            SC(SG_DONE) += 1;
            any_done = 1;
        }
    }
    if (any_done) {
        i64 j = 0;
        for (i64 i = 0; i < bs; i++) {
            i64 r = SQ(SG_Q_RUNNING, i);
            if (SR(r, SG_FINISH_STEP) < 0) SQ(SG_Q_RUNNING, j++) = (i32)r;
        }
        SC(SG_N_RUNNING) = j;
        SC(SG_RESET_PENDING) = 1;  /* a request left: the next update clears batch_full */
        i64 *last = rec + (k - 1) * N_COLS;
        last[RUNNING] = j;
        last[KV_BLOCKS] = SC(SG_PRIVATE) + SC(SG_CACHE_TOKENS);
    }
    *k_out = k;
    return STATUS_OK;
}

/* SGLangScheduler.run: a prefill batch if get_new_batch_prefill gives one, else a decode of the
 * running batch (an idle round clears batch_full and asks again), from *step_io until every
 * request finished (STATUS_OK), none can be placed (STATUS_STUCK), the steps run out, the
 * record has less room than one round may write (kp[SGK_MAX_ROWS]: STATUS_FULL, hand on or
 * grow it and call again) or the step reaches pause_step (STATUS_PAUSED). `rec` holds steps
 * base .. base + cap - 1. The state lives in the arrays: a call resumes where the last one
 * stopped. scratch: 4 x ws entries, ws > max(running, waiting sorted by lpm). */
i64 tk_sglang_run(const i64 *kp, const double *kf, i32 *req, i64 n, i32 *grp, i32 *q, i64 w,
                  i64 *c, double *f, i64 *rec, i64 base, i64 cap, i64 *step_io, i64 fast,
                  i64 max_steps, i64 pause_step, i64 *scratch, i64 ws) {
    SgState st = { kp, kf, req, grp, q, c, f, n, w, ws, scratch };
    SgState *s = &st;
    i64 step = *step_io, status = STATUS_OK;
    if (SK(SGK_PAGE) < 1 || SK(SGK_PAGE) + 1 > ws) return STATUS_OVERFLOW;  /* sg_decode's pc */
    while (SC(SG_DONE) < n) {
        if (step >= max_steps) { status = STATUS_MAX_STEPS; break; }
        if (base + cap - step < SK(SGK_MAX_ROWS)) { status = STATUS_FULL; break; }
        if (step >= pause_step) { status = STATUS_PAUSED; break; }
        i64 nb = sg_prefill_batch(s, step);
        if (nb == 0 && SC(SG_N_RUNNING) == 0 && SC(SG_CHUNKED) < 0) {
            SC(SG_BATCH_FULL) = SC(SG_RESET_PENDING) = 0;  /* an idle round clears it */
            nb = sg_prefill_batch(s, step);
            if (nb == 0) { status = STATUS_STUCK; break; }
        }
        i64 *row = rec + (step - base) * N_COLS, k = 1;
        status = nb > 0 ? sg_run_prefill(s, nb, step, row)
                        : sg_decode(s, row, step, fast, max_steps, &k);
        if (status != STATUS_OK) break;
        step += k;
    }
    *step_io = step;
    return status;
}
