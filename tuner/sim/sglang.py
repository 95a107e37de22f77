"""SGLang's scheduler as the simulator runs it: one step record per engine iteration, the same
schema as the C loop's (tuner.sim.steps), so tuner.sim.simulator prices both alike.

Read from SGLang's source, the v0.5 line (tuner.core.sglang names the files and constants):

* A step is a prefill ("extend") batch or a decode batch, never both (``--enable-mixed-chunk``
  off, the default). ``Scheduler.get_next_batch_to_run`` asks ``get_new_batch_prefill`` first
  and decodes the running batch only when it returns nothing.
* ``get_new_batch_prefill`` returns nothing while the running batch is marked full (or nothing
  waits) and no chunked request is in flight. Otherwise a ``PrefillAdder`` takes the chunked
  request's next chunk, then waiting requests in queue order: each must leave
  ``rem_total_tokens`` = free + evictable KV - sum over running requests of
  min(max_new - generated, 4096) x new_token_ratio - what this batch already took (each request
  its extend tokens in whole pages + min(max_new, 4096) + one page) above zero;
  ``--chunked-prefill-size`` caps the batch's tokens, each request's extend counted in whole
  pages (``ceil_paged_tokens``; a prompt whose pages exceed what is left is cut at a page
  multiple, ``_select_prefill_admission``, and finishes in later steps, one chunked request at
  a time; the chunked request's later chunks, ``add_chunked_req``, are not aligned),
  ``--max-prefill-tokens`` too, and
  ``--max-running-requests`` the running count. A request refused for KV (NO_TOKEN) marks the
  batch full: no prefill is tried again until a running request leaves (finishes or is
  retracted: ``update_running_batch``, one decode step later, clears the mark).
* KV is held in whole pages of ``page_size`` tokens (``PagedTokenToKVPoolAllocator``): a
  request holds its tokens rounded up to whole pages (its last page partly filled; a cached
  prefix is whole pages), a prefill (chunk) allocates the pages its new tokens reach
  (``alloc_extend``) and a decode step a new page for each request whose pages are full
  (``alloc_decode``). At page 1 that is one token per token.
* ``update_running_batch``: a decode needs a free page per running request whose pages are full
  (``check_decode_mem``: ``new_page_count_next_decode`` x page_size in 0.5.5,
  ``new_tokens_required_next_decode`` in 0.5.23; one token per request at page 1), evicting
  unused radix-cache entries first. Without it, ``ScheduleBatch.retract_decode`` retracts
  requests (fewest output tokens first, the longest prompt among equals): at least one, then
  more only until the rest's next decode has its pages (``check_decode_mem`` again, the form
  since 0.5.2; up to 0.5.1 until each kept request had 20 decode steps of room). Each one out
  has its KV freed (recompute later: prompt + tokens generated so far), then unused cached
  prefixes evicted until 20 x the requests still kept are free (``release_req``), and goes
  to the end of the waiting queue; new_token_ratio = min(1, (decoded + 20 x remaining) /
  (sum max_new + 1)); otherwise the ratio decays by (init - min) / 600 towards min.
* Radix cache (``RadixCache``, in whole pages): a request's prompt is matched against the cached
  prefixes when it is scheduled (at least one token is always computed); after a prefill
  (chunk) its computed prefix is inserted, a copy computed twice in one batch is freed; entries
  no running request uses stay cached and are evicted least-recently-used when KV is needed.
  Tuner knows shared prefixes as groups (Workload.prefix_ids / prefix_tokens): one entry per
  group, inserted once a member has computed the whole prefix (SGLang would also match a
  partial one). A match is whole pages of the prompt less its last token
  (``Req.adjust_max_prefix_ids``, ``RadixCache.match_prefix`` page-aligned).
* ``--schedule-policy lpm`` sorts the waiting queue by cached prefix length (longest first),
  moving a request whose prefix is not cached but another waiting request's (by more than 32
  tokens) to the end, so one member computes it first (in-batch prefix caching); with more than
  128 requests waiting SGLang falls back to FCFS (``_determine_active_policy``). ``fcfs``
  keeps the queue order.

A finished request's own tokens (beyond its group's prefix) are freed at once: SGLang inserts
them into the tree as evictable entries, which admission and decode count as free alike, so the
batches are the same; the step record's KV column counts them free. The retraction is 0.5.23's
(the next decode's pages; tuner models no SGLang scheduler before 0.5.2, so a run labelled with
an older release, such as the fidelity suite's v0.3.0 figures, retracts this way too).

* ``--schedule-policy dfs-weight`` (``_sort_by_dfs_weight``, no 128 cap) orders the whole
  waiting queue by a depth-first walk of the radix tree, heaviest subtree first: here the
  requests of the cached group with the most waiting members, then the next group's, then the
  requests with no cached prefix, each in queue order. The C loop sorts only where the
  queue may have left that order (a group cached or evicted while members wait, a retraction,
  the head group's count falling below the next one's), so a job without shared prefixes (or
  with one) costs what fcfs costs; with many groups of near-equal counts it re-sorts the queue
  at most prefill steps, O(waiting) each, as SGLang does (a 200,000-request job with 40 groups
  simulates in ~20 s against ~2 s for fcfs). SGLang's own host time for that sort and its
  prefix matches is not priced.

Not modelled: the overlap scheduler (it hides host work: an engine-overhead matter, not the
batches'), mixed chunks, priorities, hierarchical cache. ``max_new_tokens`` is the
workload's output length (tuner knows no larger cap).

``run_schedule`` runs the C form of this scheduler (tk_sglang_run in tuner/sim/_kernels.c,
~50x faster); ``SGLangScheduler`` below, plain Python over numpy, is its reference: the C
reproduces it step for step, bit for bit (``run_schedule(..., reference=True)`` runs it;
tests/test_sglang_c.py compares them). Both write a decode stretch in which no request
finishes, KV suffices and no prefill can start in one go (the vLLM loop's skip_decodes), so the
loop runs once per prefill, finish or retraction, not once per step.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import cache

import numpy as np

from tuner.core import sglang as sg
from tuner.sim import scheduler as sch
from tuner.sim.kernels import check_layout, library
from tuner.sim.steps import (
    DECODE_KV,
    DECODES,
    KV_BLOCKS,
    N_COLS,
    PREEMPTED,
    PREFILL_CTX,
    PREFILL_SQ,
    PREFILL_TOKENS,
    RUNNING,
    SAMPLED,
)


class _Stuck(Exception):
    """No request can be placed (KV too small for it)."""


POLICY_FCFS, POLICY_LPM, POLICY_DFS_WEIGHT = 0, 1, 2  # the C loop's codes (SGK_POLICY)


def policy_code(settings: sg.SGLangSettings) -> int:
    """The queue order SGLang runs: the cache-aware policies need the radix cache
    (SchedulePolicy._validate_and_adjust_policy turns them into fcfs without it)."""
    if not settings.radix_cache:
        return POLICY_FCFS
    return {"lpm": POLICY_LPM, "dfs-weight": POLICY_DFS_WEIGHT}.get(settings.schedule_policy,
                                                                    POLICY_FCFS)


def _groups(prefix_ids, prefix_tokens, n: int, radix: bool, page_size: int = sg.PAGE_SIZE):
    """Prefix groups: (dense group id per request or -1, prefix tokens per group), the vLLM
    loop's grouping at SGLang's page (the radix cache matches whole pages:
    RadixKey.page_aligned), one length per group (the readers enforce one per id; the longest
    otherwise). No radix cache: no groups."""
    if not radix:
        return np.full(n, -1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    gid, plen, ng = sch.prefix_groups(prefix_ids, prefix_tokens, n, page_size)
    glen = np.zeros(ng, dtype=np.int64)
    has = gid >= 0
    np.maximum.at(glen, gid[has], plen[has] * page_size)
    return gid, glen


def admission_floor(prompt, output, prefix_ids, prefix_tokens, radix: bool,
                    page_size: int = sg.PAGE_SIZE) -> np.ndarray:
    """Per request, the fewest KV-pool tokens with which the scheduler admits it while nothing
    else runs (PrefillAdder.add_one_req: its new tokens + max_new + a page must stay below the
    pool less the cached prefix it locks): prompt + output + page_size + 1, and with the radix
    cache the part of its group's cached prefix it does not use besides (a prompt that is all
    cached prefix matches whole pages of all but its last token and holds the rest twice; a
    group of one member never finds its prefix cached). A smaller pool never admits the
    request."""
    p = np.asarray(prompt, dtype=np.int64)
    need = p + np.asarray(output, dtype=np.int64) + page_size + 1
    if radix and prefix_ids is not None:
        gid, glen = _groups(prefix_ids, prefix_tokens, len(p), True, page_size)
        members = np.bincount(gid[gid >= 0], minlength=len(glen))
        has = gid >= 0
        has[has] = members[gid[has]] > 1  # a group of one never finds its prefix cached
        g = glen[gid[has]]
        need[has] += g - np.minimum(g, (p[has] - 1) // page_size * page_size)
    return need


class SGLangScheduler:
    """One replica's SGLang scheduler over requests queued in the given order."""

    def __init__(self, prompt, output, *, capacity_tokens: int, chunked_prefill_size: int,
                 max_running: int, settings: sg.SGLangSettings,
                 prefix_ids=None, prefix_tokens=None, page_size: int = sg.PAGE_SIZE):
        self.P = np.asarray(prompt, dtype=np.int64)
        self.page = int(page_size)
        self.O = np.asarray(output, dtype=np.int64)
        n = self.n = self.P.shape[0]
        self.C = int(capacity_tokens)
        self.chunk = int(chunked_prefill_size)
        self.max_running = int(max_running)
        self.s = settings
        self.radix = settings.radix_cache and prefix_ids is not None
        self.policy = policy_code(settings)
        self.gid, self.glen = _groups(prefix_ids, prefix_tokens, n, self.radix, self.page)
        ng = len(self.glen)
        self.cached = np.zeros(ng, dtype=bool)
        self.ref = np.zeros(ng, dtype=np.int64)
        self.lru: OrderedDict[int, None] = OrderedDict()  # cached, unused groups, oldest first
        # per-request progress
        self.computed = np.zeros(n, dtype=np.int64)  # tokens with KV (shared ones included)
        self.shared = np.zeros(n, dtype=np.int64)  # of those, the group's cached prefix
        self.generated = np.zeros(n, dtype=np.int64)
        self.finish_step = np.full(n, -1, dtype=np.int64)
        self.first_step = np.full(n, -1, dtype=np.int64)
        # KV: private tokens of the requests holding KV, tokens of the cached groups
        self.private = 0
        self.cache_tokens = 0
        self.evictable = 0
        self.waiting: list[int] = list(range(n))
        self.running: list[int] = []
        self.chunked = -1
        self.batch_full = False
        self.reset_pending = False  # a request left: update_running_batch clears batch_full
        self.ratio = settings.init_new_token_ratio
        self.done = 0
        self.cached_tokens = 0
        self.rows: list[np.ndarray] = []

    # ---- KV ----------------------------------------------------------------------------------
    @property
    def available(self) -> int:
        return self.C - self.private - self.cache_tokens

    def _evict(self, need: int) -> None:
        """Evict unused cached prefixes, least recently used first, until `need` tokens are
        free (or none is left to evict)."""
        while self.available < need and self.lru:
            g, _ = self.lru.popitem(last=False)
            self.cached[g] = False
            self.cache_tokens -= int(self.glen[g])
            self.evictable -= int(self.glen[g])

    def _alloc(self, tokens: int) -> None:
        self._evict(tokens)
        if self.available < tokens:
            raise _Stuck
        self.private += tokens

    def _lock(self, g: int) -> None:
        if self.ref[g] == 0:
            self.lru.pop(g, None)
            self.evictable -= int(self.glen[g])
        self.ref[g] += 1

    def _unlock(self, g: int) -> None:
        self.ref[g] -= 1
        if self.ref[g] == 0 and self.cached[g]:
            self.lru[g] = None  # most recently used
            self.evictable += int(self.glen[g])

    def _paged(self, tokens: int) -> int:
        """Pool tokens that `tokens` KV tokens occupy: whole pages (the last one partly filled)."""
        return -(-tokens // self.page) * self.page

    def _release(self, r: int) -> None:
        """Free r's KV (a finished request: its private pages; its prefix stays cached)."""
        self.private -= self._paged(int(self.computed[r])) - int(self.shared[r])
        if self.shared[r] > 0:
            self._unlock(int(self.gid[r]))
        self.computed[r] = 0
        self.shared[r] = 0

    def _insert(self, r: int) -> None:
        """After r's prefill (chunk): put its computed group prefix in the radix cache (a copy
        already cached is freed: r uses the cached one)."""
        g = int(self.gid[r])
        if g < 0 or self.shared[r] > 0 or self.computed[r] < self.glen[g]:
            return
        x = int(self.glen[g])
        self.private -= x
        self.shared[r] = x
        if self.cached[g]:  # computed twice: r's copy is freed, r uses (locks) the cached one
            self._lock(g)
            return
        self.cached[g] = True
        self.cache_tokens += x
        self.ref[g] += 1  # r holds it (not evictable while r runs)

    def _hit(self, r: int) -> int:
        g = int(self.gid[r])
        if g < 0 or not self.cached[g]:
            return 0
        # whole pages of what it holds less the token it recomputes (SGLang's match)
        return int(min(self.glen[g],
                       (self.P[r] + self.generated[r] - 1) // self.page * self.page))

    # ---- prefill -----------------------------------------------------------------------------
    def _sort_lpm(self) -> None:
        """SchedulePolicy.calc_priority for lpm (<= 128 waiting): longest cached prefix first,
        the in-batch prefix caching check moving later members of an uncached group last."""
        seen: set[int] = set()
        keys = []
        for r in self.waiting:
            hit = self._hit(r)
            key = -hit
            g = int(self.gid[r])
            if hit <= sg.IN_BATCH_PREFIX_THRESHOLD and g >= 0 \
                    and self.glen[g] > sg.IN_BATCH_PREFIX_THRESHOLD:
                if g in seen:
                    key = float("inf")
                else:
                    seen.add(g)
            keys.append(key)
        order = sorted(range(len(self.waiting)), key=keys.__getitem__)
        self.waiting = [self.waiting[i] for i in order]

    def _sort_dfs_weight(self) -> None:
        """SchedulePolicy._sort_by_dfs_weight over tuner's one-level tree: a node's weight is
        the number of waiting requests whose matched prefix ends there; the depth-first walk
        visits the root's children heaviest first (equal weights: the lower group id, where
        SGLang keeps the order the children were inserted, unknown here) and puts each node's requests after
        its subtree's, in queue order, so uncached ones (the root's) come last."""
        count: dict[int, int] = {}
        for r in self.waiting:
            g = int(self.gid[r])
            if g >= 0 and self.cached[g]:
                count[g] = count.get(g, 0) + 1
        start, pos = {}, 0
        for g in sorted(count, key=lambda g: (-count[g], g)):
            start[g], pos = pos, pos + count[g]
        out = [0] * len(self.waiting)
        for r in self.waiting:
            g = int(self.gid[r])
            if g >= 0 and self.cached[g]:
                out[start[g]] = r
                start[g] += 1
            else:
                out[pos] = r
                pos += 1
        self.waiting = out

    def _running_offset(self) -> float:
        if not self.running:
            return 0.0
        run = np.fromiter(self.running, dtype=np.int64, count=len(self.running))
        left = np.minimum(self.O[run] - self.generated[run], sg.CLIP_MAX_NEW_TOKENS)
        return float(left.sum()) * self.ratio

    def _prefill_batch(self, step: int) -> list[tuple[int, int]] | None:
        """get_new_batch_prefill: [(request, tokens this step)] or None."""
        if (self.batch_full or not self.waiting) and self.chunked < 0:
            return None
        allocatable = self.max_running - len(self.running)
        if allocatable <= 0 and self.chunked < 0:
            self.batch_full = True
            return None
        if self.policy == POLICY_LPM and len(self.waiting) <= sg.LPM_MAX_WAITING:
            self._sort_lpm()
        elif self.policy == POLICY_DFS_WEIGHT:
            self._sort_dfs_weight()
        offset = self._running_offset()  # rem_total_token_offset
        cur_offset = 0
        rem_input = self.s.max_prefill_tokens
        rem_chunk = self.chunk
        batch: list[tuple[int, int]] = []
        new_chunked = -1

        def charge(ext: int, max_new: int) -> None:
            # _update_prefill_budget: the KV and compute budgets alike take the extend in
            # whole pages (ceil_paged_tokens; raw only under gfx95's exact chunk fill)
            nonlocal offset, cur_offset, rem_input, rem_chunk
            ext = self._paged(ext)
            offset += ext + max_new + self.page
            cur_offset += ext + self.page
            rem_input -= ext
            rem_chunk -= ext

        if self.chunked >= 0:  # PrefillAdder.add_chunked_req
            r = self.chunked
            rem = min(rem_chunk, int(self.available + self.evictable - offset))
            if rem <= 0:
                rem = rem_chunk
            left = int(self.P[r] + self.generated[r] - self.computed[r])
            new_len = min(left, rem)
            batch.append((r, new_len))
            truncated = left > rem
            charge(new_len, 0 if truncated else
                   int(min(self.O[r] - self.generated[r], sg.CLIP_MAX_NEW_TOKENS)))
            if truncated:
                new_chunked = r
        admitted = 0
        for r in self.waiting:
            if len(batch) >= allocatable:
                self.batch_full = True
                break
            hit = self._hit(r)
            ext = int(self.P[r] + self.generated[r]) - hit
            max_new = int(min(max(self.O[r] - self.generated[r], 0), sg.CLIP_MAX_NEW_TOKENS))
            total = ext + max_new + self.page
            if total >= self.available + self.evictable - offset:
                self.batch_full = True  # NO_TOKEN
                break
            g = int(self.gid[r])
            if hit > 0:  # the match is locked: an unused cached prefix stops being evictable
                self._lock(g)
                if total >= self.available + self.evictable - offset:
                    self._unlock(g)
                    self.batch_full = True
                    break
            if self._paged(ext) <= rem_chunk:  # _select_prefill_admission: fits whole
                batch.append((r, ext))
                charge(ext, max_new)
            else:
                # cut at a page multiple (the match is whole pages: the chunk ends on one)
                x = rem_chunk // self.page * self.page
                if x <= 0:
                    if hit > 0:
                        self._unlock(g)
                    break  # OTHER
                batch.append((r, x))
                new_chunked = r
                charge(x, 0)
            admitted += 1
            self.computed[r] = hit
            self.shared[r] = hit
            self.cached_tokens += hit
            if self.first_step[r] < 0:
                self.first_step[r] = step
            free = self.available + self.evictable
            if free - offset <= 0 or free - cur_offset <= 0:
                self.batch_full = True  # budget_state NO_TOKEN
                break
            if rem_input <= 0 or rem_chunk <= 0:
                break  # OTHER
        if admitted:
            del self.waiting[:admitted]  # admitted in queue order, a prefix of it
        if not batch:
            return None
        self.chunked = new_chunked
        return batch

    def _run_prefill(self, batch: list[tuple[int, int]], step: int) -> np.ndarray:
        row = np.zeros(N_COLS, dtype=np.int64)
        pf = sq = ctx = sampled = 0
        finished = []
        for r, ext in batch:
            c0 = int(self.computed[r])
            self._alloc(self._paged(c0 + ext) - self._paged(c0))  # the pages it reaches
            pf += ext
            sq += ext * ext
            ctx += ext * c0
            self.computed[r] = c0 + ext
            if self.radix:
                self._insert(r)
            if self.computed[r] == self.P[r] + self.generated[r]:  # its last chunk: a token
                self.generated[r] += 1
                sampled += 1
                if self.generated[r] >= self.O[r]:
                    finished.append(r)
                elif r != self.chunked:
                    self.running.append(r)
        for r in finished:
            self._release(r)
            self.finish_step[r] = step
            self.done += 1
        row[PREFILL_TOKENS], row[PREFILL_SQ], row[PREFILL_CTX] = pf, sq, ctx
        row[SAMPLED] = sampled
        row[KV_BLOCKS] = self.private + self.cache_tokens
        row[RUNNING] = len(self.running) + (self.chunked >= 0)
        return row[None, :]

    # ---- decode ------------------------------------------------------------------------------
    def _full_pages(self, rs) -> int:
        """Of requests `rs`, how many need a new page at their next decode (their pages are
        full: ScheduleBatch.new_page_count_next_decode; all of them at page 1)."""
        return int(np.count_nonzero(self.computed[np.asarray(rs, dtype=np.int64)]
                                    % self.page == 0))

    def _retract(self) -> int:
        """retract_decode (sglang 0.5.2 on; 0.5.23 read): at least one request out, then more
        until the rest's next decode has its pages (check_decode_mem over the kept requests),
        at least one kept; each one out evicts unused cached prefixes until
        RETRACT_DECODE_STEPS x the requests still kept are free (release_req). Returns how
        many. (Up to 0.5.1 it retracted until RETRACT_DECODE_STEPS per kept request were free;
        tuner models no release before 0.5.2 here.)"""
        order = sorted(self.running, key=lambda r: (self.generated[r], -self.P[r]), reverse=True)
        full = self._full_pages(order)
        out = 0
        while order and (out == 0 or self.available + self.evictable < self.page * full):
            if len(order) == 1:
                break
            r = order.pop()
            full -= int(self.computed[r] % self.page == 0)
            self._release(r)
            self._evict(sg.RETRACT_DECODE_STEPS * len(order))  # release_req's evict_from_tree_cache
            self.waiting.append(r)
            out += 1
        kept_set = set(order)
        self.running = [r for r in self.running if r in kept_set]
        kept = np.fromiter(order, dtype=np.int64, count=len(order))
        self.ratio = min(1.0, float(self.generated[kept].sum()
                                    + sg.RETRACT_DECODE_STEPS * len(kept))
                         / float(self.O[kept].sum() + 1))
        return out

    def _decode(self, step: int, fast: bool, max_steps: int) -> np.ndarray:
        """update_running_batch and one decode step; with `fast`, the decode-only steps that
        follow it up to the next finish, KV shortage or step limit as well."""
        if self.reset_pending:
            self.batch_full = False
            self.reset_pending = False
        bs = len(self.running)
        retracted = 0
        if self.available + self.evictable < self.page * self._full_pages(self.running):
            retracted = self._retract()
            self.batch_full = False
            bs = len(self.running)
            if self.available + self.evictable < self.page * self._full_pages(self.running):
                raise _Stuck
        else:
            self.ratio = max(self.ratio - self.s.new_token_ratio_decay,
                             self.s.min_new_token_ratio)
        run = np.fromiter(self.running, dtype=np.int64, count=bs)
        left = self.O[run] - self.generated[run]
        # pages(j), the new pages steps 1..j take: step j one for each request whose KV length
        # before it, computed + j - 1, is a whole number of pages, so a request with offset
        # o = -computed mod page takes one at steps o + 1, o + 1 + page, ...; over a cycle of
        # `page` steps each request takes one. pc[m]: requests with offset < m.
        pc = np.zeros(self.page + 1, dtype=np.int64)
        np.cumsum(np.bincount((-self.computed[run]) % self.page, minlength=self.page),
                  out=pc[1:])
        k = 1
        if (fast and not retracted and self.chunked < 0
                and (self.batch_full or not self.waiting)):
            # the following steps repeat this one until a request finishes or KV runs out:
            # the most steps whose pages the free pool holds (pages(j) <= free pages)
            free_pages = (self.available + self.evictable) // self.page
            q = free_pages // bs
            m = int(np.searchsorted(pc[:self.page], free_pages - q * bs, side="right")) - 1
            k = int(max(1, min(int(left.min()), q * self.page + m, max_steps - step)))
        j = np.arange(1, k + 1, dtype=np.int64)
        need_j = self.page * (bs * (j // self.page) + pc[j % self.page])  # tokens by step j
        # step j needs its pages free: unused cached prefixes are evicted (LRU) at the first
        # step that needs them, as check_decode_mem does step by step
        cache_j = np.full(k, self.cache_tokens, dtype=np.int64)
        a0, evicted = self.available, 0
        while a0 + evicted < need_j[-1]:
            if not self.lru:
                raise _Stuck
            # the step that evicts it: the first that needs more than is free
            at = int(np.searchsorted(need_j, a0 + evicted, side="right")) + 1
            g, _ = self.lru.popitem(last=False)
            x = int(self.glen[g])
            self.cached[g] = False
            cache_j[at - 1:] -= x
            evicted += x
        self.cache_tokens -= evicted
        self.evictable -= evicted
        rows = np.zeros((k, N_COLS), dtype=np.int64)
        rows[:, DECODES] = bs
        rows[:, DECODE_KV] = int(self.computed[run].sum()) + bs * j
        rows[:, SAMPLED] = bs
        rows[:, KV_BLOCKS] = self.private + need_j + cache_j
        self.private += int(need_j[-1])
        rows[:, RUNNING] = bs
        rows[0, PREEMPTED] = retracted
        self.computed[run] += k
        self.generated[run] += k
        if k > 1:  # the ratio decays once per step (the first decayed above)
            self.ratio = max(self.ratio - (k - 1) * self.s.new_token_ratio_decay,
                             self.s.min_new_token_ratio)
        done = run[self.generated[run] >= self.O[run]]
        if done.size:
            last = step + k - 1
            for r in done.tolist():
                self._release(r)
                self.finish_step[r] = last
                self.done += 1
            gone = set(done.tolist())
            self.running = [r for r in self.running if r not in gone]
            self.reset_pending = True
            rows[-1, RUNNING] = len(self.running)
            rows[-1, KV_BLOCKS] = self.private + self.cache_tokens
        return rows

    # ---- the loop ----------------------------------------------------------------------------
    def run(self, *, fast: bool = True, max_steps: int, cancel=None) -> int:
        """Steps until every request finished (STATUS_OK), none can be placed or the steps
        run out; `cancel` (a threading.Event) stops it with KeyboardInterrupt."""
        step = 0
        status = sch.STATUS_OK
        rounds = 0
        try:
            while self.done < self.n:
                rounds += 1
                if cancel is not None and rounds % 4096 == 0 and cancel.is_set():
                    raise KeyboardInterrupt
                if step >= max_steps:
                    status = sch.STATUS_MAX_STEPS
                    break
                batch = self._prefill_batch(step)
                if batch is None and not self.running and self.chunked < 0:
                    self.batch_full = self.reset_pending = False  # an idle round clears it
                    batch = self._prefill_batch(step)
                    if batch is None:
                        status = sch.STATUS_STUCK
                        break
                if batch is not None:
                    rows = self._run_prefill(batch, step)
                else:
                    rows = self._decode(step, fast, max_steps)
                self.rows.append(rows)
                step += len(rows)
        except _Stuck:
            status = sch.STATUS_STUCK
        return status

    def steps(self) -> np.ndarray:
        if not self.rows:
            return np.zeros((0, N_COLS), dtype=np.int64)
        return np.concatenate(self.rows)


# ---- the C loop (tk_sglang_run) ---------------------------------------------------------------
# Its state's layout (tuner/sim/_kernels.c numbers it alike; checked on load): per request
# (int32, as the vLLM loop's), per prefix group, the queues and the scalars.
R_PROMPT, R_OUTPUT, R_GROUP, R_COMPUTED, R_SHARED, R_GENERATED, R_FINISH_STEP, R_FIRST_STEP = \
    range(8)
N_R_COLS = 8
G_LEN, G_CACHED, G_REF, G_IN_LRU, G_PREV, G_NEXT, G_SEEN, G_WAIT = range(8)
N_G_COLS = 8
Q_WAITING = 3  # q's rows: running, batch requests, batch tokens (w each), then waiting (n)
N_Q_ROWS = 4
(S_N_RUNNING, S_WAIT_HEAD, S_N_WAITING, S_CHUNKED, S_BATCH_FULL, S_RESET_PENDING, S_DONE,
 S_PRIVATE, S_CACHE_TOKENS, S_EVICTABLE, S_CACHED_TOKENS, S_LRU_HEAD, S_LRU_TAIL,
 S_WAIT_CACHED, S_DFS_DIRTY) = range(15)
N_SLOTS = 15
# kp: capacity, chunk, max running, max prefill tokens, radix, policy code, the four SGLang constants,
# the page, the most rows one round writes; kf: the ratio's decay and floor
N_PARAMS, K_MAX_ROWS, N_FPARAMS = 12, 11, 2
STATUS_OVERFLOW = 5  # a broken invariant (running + chunked > max running): never expected
# 2: kp's policy slot holds a code (fcfs, lpm, dfs-weight); 3: G_WAIT & co; 4: KV in whole pages;
# 5: retraction as sglang >= 0.5.2 (the next decode's pages; release_req's eviction), prompts
# charged and cut in whole pages
_ABI_VERSION = 5
_PAUSE_EVERY_STEPS = 1 << 16  # steps between chances to react to Ctrl-C (the vLLM loop's)


@cache
def _kernel():
    lib = library()
    check_layout(lib, [N_R_COLS, R_PROMPT, R_OUTPUT, R_GROUP, R_FINISH_STEP, R_FIRST_STEP,
                       N_G_COLS, G_LEN, G_PREV, G_NEXT, N_Q_ROWS, Q_WAITING, N_SLOTS,
                       S_N_WAITING, S_CHUNKED, S_CACHED_TOKENS, S_LRU_HEAD, S_LRU_TAIL,
                       N_PARAMS, K_MAX_ROWS, N_FPARAMS, sch.STATUS_FULL, sch.STATUS_PAUSED,
                       STATUS_OVERFLOW, G_WAIT, S_WAIT_CACHED, S_DFS_DIRTY, _ABI_VERSION],
                 "tk_sglang_layout")
    return lib


def _run_c(prompt, output, *, capacity_tokens: int, chunked_prefill_size: int,
           max_running: int, settings: sg.SGLangSettings, prefix_ids, prefix_tokens,
           fast: bool, max_steps: int, on_steps, cancel,
           page_size: int = sg.PAGE_SIZE) -> sch.Schedule:
    """SGLangScheduler's schedule from the C loop: the same state in arrays, resumed after
    every pause (Ctrl-C, `cancel`) and whenever the record is full (grown, or its first
    STREAM_ROWS rows handed to `on_steps`, so the slices are those of the reference)."""
    lib = _kernel()
    n = prompt.shape[0]
    radix = settings.radix_cache and prefix_ids is not None
    gid, glen = _groups(prefix_ids, prefix_tokens, n, radix, page_size)
    req = np.zeros((n, N_R_COLS), dtype=np.int32)
    req[:, R_PROMPT], req[:, R_OUTPUT], req[:, R_GROUP] = prompt, output, gid
    req[:, R_FINISH_STEP] = req[:, R_FIRST_STEP] = -1
    grp = np.zeros((max(len(glen), 1), N_G_COLS), dtype=np.int32)
    grp[: len(glen), G_LEN] = glen
    grp[: len(glen), G_WAIT] = np.bincount(gid[gid >= 0], minlength=len(glen))  # all wait
    grp[:, G_PREV] = grp[:, G_NEXT] = -1
    w = max(min(n, int(max_running)), 0) + 1  # running + chunked <= max_running
    q = np.zeros(Q_WAITING * w + n, dtype=np.int32)
    q[Q_WAITING * w:] = np.arange(n)
    c = np.zeros(N_SLOTS, dtype=np.int64)
    c[S_N_WAITING] = n
    c[S_CHUNKED] = c[S_LRU_HEAD] = c[S_LRU_TAIL] = -1
    c[S_DFS_DIRTY] = 1
    ratio = np.array([settings.init_new_token_ratio], dtype=np.float64)
    policy = policy_code(settings)
    # sorts: the running batch, lpm's queue (<= 128), dfs-weight's groups and queue (all of it)
    # and the decode's count of requests per page offset (page + 1)
    ws = max(w, (n if policy == POLICY_DFS_WEIGHT else min(n, sg.LPM_MAX_WAITING)) + 1,
             int(page_size) + 1)
    scratch = np.zeros(4 * ws, dtype=np.int64)
    # a round writes one prefill row or a decode stretch, which ends at a finish at the latest
    max_rows = max(int(output.max(initial=0)), 1)
    kp = np.array([capacity_tokens, chunked_prefill_size, max_running,
                   settings.max_prefill_tokens, radix,
                   policy,
                   sg.CLIP_MAX_NEW_TOKENS, sg.RETRACT_DECODE_STEPS, sg.LPM_MAX_WAITING,
                   sg.IN_BATCH_PREFIX_THRESHOLD, page_size, max_rows], dtype=np.int64)
    kf = np.array([settings.new_token_ratio_decay, settings.min_new_token_ratio])
    stream = sch.STREAM_ROWS
    rows = stream + max_rows if on_steps is not None else max(1024, 2 * max_rows)
    # not zeroed: the loop writes every column of each row it records (a memset first), and
    # no row past the steps recorded is read; zeroing the ~4.7 MB was ~0.25 ms a replica
    rec = np.empty((rows, N_COLS), dtype=np.int64)
    step = np.zeros(1, dtype=np.int64)
    base = 0  # the step in rec's first row
    while True:
        status = lib.tk_sglang_run(kp, kf, req, n, grp, q, w, c, ratio, rec, base,
                                   rec.shape[0], step, int(fast), max_steps,
                                   int(step[0]) + _PAUSE_EVERY_STEPS, scratch, ws)
        filled = int(step[0]) - base
        if status == sch.STATUS_FULL and on_steps is not None:
            on_steps(rec[:stream])  # more than `stream` rows are there
            rec[: filled - stream] = rec[stream:filled]
            base += stream
        elif status == sch.STATUS_FULL:
            grown = np.zeros((rec.shape[0] * 2, N_COLS), dtype=np.int64)
            grown[: rec.shape[0]] = rec
            rec = grown
        elif status == sch.STATUS_PAUSED:
            if cancel is not None and cancel.is_set():
                raise KeyboardInterrupt
        elif status == STATUS_OVERFLOW:
            raise RuntimeError("SGLang's C scheduler: more running requests than "
                               "--max-running-requests, or a page below 1 (a bug)")
        else:
            break
    done = rec[:filled]
    if on_steps is not None:
        for i in range(0, filled, stream):
            on_steps(done[i:i + stream])
        done = rec[:0]
    return sch.Schedule(steps=done, finish_step=req[:, R_FINISH_STEP].astype(np.int64),
                        first_step=req[:, R_FIRST_STEP].astype(np.int64), status=int(status),
                        cached_tokens=int(c[S_CACHED_TOKENS]))


def run_schedule(prompt_tokens, output_tokens, *, capacity_tokens: int,
                 chunked_prefill_size: int, max_running: int,
                 settings: sg.SGLangSettings | None = None, prefix_ids=None, prefix_tokens=None,
                 fast: bool = True, max_steps: int | None = None,
                 on_steps=None, cancel=None, reference: bool = False,
                 page_size: int = sg.PAGE_SIZE) -> sch.Schedule:
    """SGLang's schedule of the requests, queued in the given order (all there at step 0); a
    tuner.sim.scheduler.Schedule. `fast`: skip over decode-only stretches (the same record as
    step by step). `on_steps`: called with consecutive slices of sch.STREAM_ROWS rows of the
    record (the vLLM loop's streaming interface; views reused after the call; Schedule.steps
    is then empty). `cancel`: a threading.Event that stops it (KeyboardInterrupt), as the vLLM
    loop's. `reference`: run the Python SGLangScheduler instead of the C loop (the same
    schedule, ~50x slower; for tests). `page_size`: SGLang's KV page
    (tuner.core.sglang.sglang_page_size): each admitted request reserves one, and cached
    prefixes match in whole pages."""
    settings = settings or sg.SGLangSettings()
    prompt, output = np.asarray(prompt_tokens), np.asarray(output_tokens)
    max_steps = sch.step_limit(prompt, output, max_steps)
    # SGLang refuses a chunk that is not a whole number of pages (validation_hook:
    # "chunked_prefill_size must be divisible by page_size"); such a chunk runs here as the
    # page multiple below it, at least a page, so a prompt cut at a page multiple always moves
    page = max(int(page_size), 1)
    if int(chunked_prefill_size) > 0:
        chunked_prefill_size = max(int(chunked_prefill_size) // page * page, page)
    if not reference:
        return _run_c(prompt, output, capacity_tokens=int(capacity_tokens),
                      chunked_prefill_size=int(chunked_prefill_size),
                      max_running=int(max_running), settings=settings, prefix_ids=prefix_ids,
                      prefix_tokens=prefix_tokens, fast=bool(fast), max_steps=max_steps,
                      on_steps=on_steps, cancel=cancel, page_size=int(page_size))
    s = SGLangScheduler(prompt, output, capacity_tokens=capacity_tokens,
                        chunked_prefill_size=chunked_prefill_size, max_running=max_running,
                        settings=settings, prefix_ids=prefix_ids, prefix_tokens=prefix_tokens,
                        page_size=page_size)
    status = s.run(fast=fast, max_steps=max_steps, cancel=cancel)
    rec = s.steps()
    if on_steps is not None:
        for i in range(0, len(rec), sch.STREAM_ROWS):
            on_steps(rec[i:i + sch.STREAM_ROWS])
        rec = rec[:0]
    return sch.Schedule(steps=rec, finish_step=s.finish_step, first_step=s.first_step,
                        status=int(status), cached_tokens=int(s.cached_tokens))
