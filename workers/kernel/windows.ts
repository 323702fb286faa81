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
    this.times.push(now);
  }

  /** Adds events reported late (another isolate's), keeping the log in time order. */
  addMany(times: readonly number[]): void {
    if (times.length === 0) {
      return;
    }
    const live = this.times.slice(this.head);
    const last = live[live.length - 1];
    const sorted = [...times].sort((a, b) => a - b);
    const first = sorted[0] ?? 0;
    this.times = last === undefined || first >= last ? [...live, ...sorted] : [...live, ...sorted].sort((a, b) => a - b);
    this.head = 0;
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
 */
export class WindowCounter {
  private static readonly BUCKETS = 10;
  private readonly counts = new Array<number>(WindowCounter.BUCKETS).fill(0);
  private readonly slots = new Array<number>(WindowCounter.BUCKETS).fill(-1);
  private widthMs: number;

  constructor(windowMs: number) {
    this.widthMs = Math.max(1, Math.floor(windowMs / WindowCounter.BUCKETS));
  }

  /** Counts `n` events (one by default) at `now` and returns the total within the window. */
  hit(now: number, windowMs: number, n = 1): number {
    this.resize(windowMs);
    const index = Math.floor(now / this.widthMs);
    const slot = index % WindowCounter.BUCKETS;
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
    const index = Math.floor(now / this.widthMs);
    let sum = 0;
    for (let i = 0; i < WindowCounter.BUCKETS; i++) {
      const at = this.slots[i] ?? -1;
      if (at > index - WindowCounter.BUCKETS && at <= index) {
        sum += this.counts[i] ?? 0;
      }
    }
    return sum;
  }

  private resize(windowMs: number): void {
    const width = Math.max(1, Math.floor(windowMs / WindowCounter.BUCKETS));
    if (width !== this.widthMs) {
      // The window was changed at runtime: start counting afresh rather than mis-attribute.
      this.widthMs = width;
      this.slots.fill(-1);
      this.counts.fill(0);
    }
  }
}
