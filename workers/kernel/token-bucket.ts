// A token bucket: the admission gate's (across isolates) and each isolate's share of it. Pure and clock-free (callers pass `now`).

/**
 * The admission gate's bucket: `rate` permits per second, holding at most a tenth of a second's
 * worth, so no one-second window ever lets through much more than `rate` (at most rate + rate/10).
 */
export class TokenBucket {
  private tokens = 0;
  private at = 0;
  private rate = -1;

  static capacity(rate: number): number {
    return Math.max(1, Math.ceil(rate / 10));
  }

  /** Takes up to `want` permits at `rate`; when none are left, says how long until the next one. */
  take(want: number, rate: number, now: number): { granted: number; retryAfterMs: number } {
    if (rate <= 0) {
      this.rate = rate;
      this.tokens = 0;
      this.at = now;
      return { granted: 0, retryAfterMs: 1000 };
    }
    const capacity = TokenBucket.capacity(rate);
    if (this.rate !== rate) {
      // A new rate (or a fresh gate): start from a full bucket of the new size, never above it.
      this.tokens = this.rate < 0 ? capacity : Math.min(this.tokens, capacity);
      this.rate = rate;
      this.at = now;
    }
    this.tokens = Math.min(capacity, this.tokens + (Math.max(0, now - this.at) * rate) / 1000);
    this.at = now;
    const granted = Math.max(0, Math.min(Math.floor(want), Math.floor(this.tokens)));
    this.tokens -= granted;
    if (granted > 0) {
      return { granted, retryAfterMs: 0 };
    }
    return { granted: 0, retryAfterMs: Math.max(1, Math.ceil(((1 - this.tokens) * 1000) / rate)) };
  }
}
