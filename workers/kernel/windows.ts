// Counting structures for the per-client limits and bans. Pure and clock-free (callers pass `now`), so the
// guard object and the unit tests drive them the same way.

/**
 * Exact "at most N per window": the times of admitted events, oldest first. Holds at most as
 * many entries as were admitted within one window, so memory follows real traffic, not the limit.
 */
export class SlidingLog {
  private times: number[] = [];
  private head = 0;

  private evict(now: number, windowMs: number): void {
    const cutoff = now - windowMs;
    while (this.head < this.times.length && (this.times[this.head] ?? 0) <= cutoff) {
      this.head++;
    }
    if (this.head > 64 && this.head * 2 > this.times.length) {
      this.times = this.times.slice(this.head);
      this.head = 0;
    }
  }

  /** Events admitted within (now - windowMs, now]. */
  count(now: number, windowMs: number): number {
    this.evict(now, windowMs);
    return this.times.length - this.head;
  }

  /** Milliseconds until one more event fits under `limit`; 0 when it fits now. */
  waitMs(now: number, windowMs: number, limit: number): number {
    const n = this.count(now, windowMs);
    if (n < limit) {
      return 0;
    }
    // The event that must leave the window first is the limit-th newest.
    const blocking = this.times[this.times.length - limit] ?? now;
    return Math.max(1, blocking + windowMs - now);
  }

  add(now: number): void {
    if (this.times.length === 0) {
      // Most logs hold one event (a shopper's one purchase): an array of one, not the 17 slots
      // a first push reserves.
      this.times = [now];
      return;
    }
    this.times.push(now);
  }

  /**
   * Adds events reported late (another isolate's), keeping the log in time order. They are
   * recent, so they interleave with the log's newest entries only: those are taken off and
   * merged back with them, and the rest of the log stays where it is (a hot key's log holds
   * every event of its window, and each isolate reports several times a second).
   */
  addMany(times: readonly number[]): void {
    if (times.length === 0) {
      return;
    }
    const sorted = [...times].sort((a, b) => a - b);
    if (this.head === this.times.length) {
      // Nothing live here (a shopper's first report): the reported events are the log, in an
      // array of their own size rather than the 17 slots a first push reserves.
      this.times = sorted;
      this.head = 0;
      return;
    }
    const first = sorted[0] ?? 0;
    // The first live entry later than the earliest reported one.
    let lo = this.head;
    let hi = this.times.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.times[mid] ?? 0) <= first) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    const later = this.times.splice(lo);
    let i = 0;
    let j = 0;
    while (i < later.length && j < sorted.length) {
      const a = later[i] ?? 0;
      const b = sorted[j] ?? 0;
      if (a <= b) {
        this.times.push(a);
        i++;
      } else {
        this.times.push(b);
        j++;
      }
    }
    for (; i < later.length; i++) {
      this.times.push(later[i] ?? 0);
    }
    for (; j < sorted.length; j++) {
      this.times.push(sorted[j] ?? 0);
    }
  }

  /** True when nothing within the window remains (the key can be forgotten). */
  idle(now: number, windowMs: number): boolean {
    return this.count(now, windowMs) === 0;
  }
}

/**
 * Events in a sliding window, counted in ten buckets. It counts only whole buckets inside the
 * window, so it may miss up to a tenth of the window's oldest events but never counts one
 * from outside it: a ban decided on it is never undeserved.
 *
 * While a counter's events all fall in one bucket, as a flash crowd's shoppers' do (one purchase
 * each, kept for the ban window by the isolate and by a guard shard), it holds that bucket in
 * two fields and makes its arrays only for a second bucket (in Node, 72 bytes a counter instead of
 * 312), and the crowd's survivors are what each garbage collection has to copy.
 */
export class WindowCounter {
  private static readonly BUCKETS = 10;
  /** A slot no bucket is in (a small integer, as every slot is: see `base`). */
  private static readonly EMPTY = -(2 ** 30);
  /** The one bucket counted while there is only one (EMPTY: none yet), and its count. */
  private onlyIndex = WindowCounter.EMPTY;
  private onlyCount = 0;
  /** Per slot, its count and its bucket index; made for a second bucket. */
  private counts: number[] | undefined;
  /**
   * Each slot's bucket index, less `base` (the first index counted): small integers. Absolute
   * indices (the time over the bucket width, about 1.8 billion for a 10 s window) are past the
   * 2^30 that V8 keeps unboxed when it compresses pointers, and would make the array one of
   * doubles for every client of a crowd.
   */
  private slots: number[] | undefined;
  private base: number | undefined;
  private widthMs: number;

  constructor(windowMs: number) {
    this.widthMs = Math.max(1, Math.floor(windowMs / WindowCounter.BUCKETS));
  }

  /** Counts `n` events (one by default) at `now` and returns the total within the window. */
  hit(now: number, windowMs: number, n = 1): number {
    this.resize(windowMs);
    const index = this.indexOf(now);
    if (this.slots === undefined || this.counts === undefined) {
      const only = this.onlyIndex;
      if (only === WindowCounter.EMPTY || only === index || index - only >= WindowCounter.BUCKETS) {
        // The first bucket, the same one, or one whose events have all left the window.
        this.onlyCount = only === index ? this.onlyCount + n : n;
        this.onlyIndex = index;
        return this.total(now, windowMs);
      }
      this.slots = new Array<number>(WindowCounter.BUCKETS).fill(WindowCounter.EMPTY);
      this.counts = new Array<number>(WindowCounter.BUCKETS).fill(0);
      const slot = WindowCounter.slotOf(only);
      this.slots[slot] = only;
      this.counts[slot] = this.onlyCount;
    }
    const slot = WindowCounter.slotOf(index);
    if (this.slots[slot] !== index) {
      this.slots[slot] = index;
      this.counts[slot] = 0;
    }
    this.counts[slot] = (this.counts[slot] ?? 0) + n;
    return this.total(now, windowMs);
  }

  /** Events within the window ending at `now` (whole buckets only). */
  total(now: number, windowMs: number): number {
    this.resize(windowMs);
    const index = this.indexOf(now);
    if (this.slots === undefined || this.counts === undefined) {
      return this.onlyIndex !== WindowCounter.EMPTY && WindowCounter.within(this.onlyIndex, index) ? this.onlyCount : 0;
    }
    let sum = 0;
    for (let i = 0; i < WindowCounter.BUCKETS; i++) {
      if (WindowCounter.within(this.slots[i] ?? WindowCounter.EMPTY, index)) {
        sum += this.counts[i] ?? 0;
      }
    }
    return sum;
  }

  /** Whether bucket `at` is inside the window that ends with bucket `index`. */
  private static within(at: number, index: number): boolean {
    return at > index - WindowCounter.BUCKETS && at <= index;
  }

  private static slotOf(index: number): number {
    return ((index % WindowCounter.BUCKETS) + WindowCounter.BUCKETS) % WindowCounter.BUCKETS;
  }

  /** The bucket of `now`, counted from the first bucket this counter saw. */
  private indexOf(now: number): number {
    const absolute = Math.floor(now / this.widthMs);
    this.base ??= absolute;
    return absolute - this.base;
  }

  private resize(windowMs: number): void {
    const width = Math.max(1, Math.floor(windowMs / WindowCounter.BUCKETS));
    if (width !== this.widthMs) {
      // The window was changed at runtime: start counting afresh rather than mis-attribute.
      this.widthMs = width;
      this.base = undefined;
      this.onlyIndex = WindowCounter.EMPTY;
      this.onlyCount = 0;
      this.slots = undefined;
      this.counts = undefined;
    }
  }
}
