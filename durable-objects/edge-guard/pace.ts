import { GUARD_MAX_SLOWDOWN } from '../../workers/kernel/contract';

// How a guard shard keeps the isolates' reports to it near REPORTS_PER_SECOND however large the
// fleet: it counts the reports it hears each second and, once a second, moves a slowdown factor
// halfway (the square root of the ratio) toward what its smoothed rate asks for: up when over
// the aim, down when under, never below 1 nor above GUARD_MAX_SLOWDOWN. Its replies carry the
// factor while it is above 1, and an isolate spaces its report rounds that many times further
// apart (workers/edge/guard-reports.ts). Moving the factor rather than setting it from the
// count is what keeps it steady (the count it sees is already the slowed one), and the half
// steps and the smoothing keep it from swinging, since isolates hear it a round late. Pure
// (callers pass `now`).

/** The reports a second a guard shard aims to hear at most. */
export const REPORTS_PER_SECOND = 500;

/** The weight of the last second in the rate the factor follows (the rest is the seconds before). */
const SMOOTHING = 0.3;

export class ReportPace {
  private second = 0;
  private heard = 0;
  /** Reports a second, smoothed over the last few. */
  private rate = 0;
  private factor = 1;

  /** Counts a report heard at `now`; the factor the reply carries (1: no slowdown). */
  heardAt(now: number): number {
    const second = Math.floor(now / 1000);
    if (second !== this.second) {
      this.rate = (1 - SMOOTHING) * this.rate + SMOOTHING * this.heard;
      // Seconds with no report at all count as quiet ones.
      for (let quiet = Math.min(second - this.second - 1, 10); quiet > 0; quiet--) {
        this.rate *= 1 - SMOOTHING;
      }
      // Halfway to the factor the rate asks for each second: the isolates hear it a round late.
      const step = Math.sqrt(this.rate / REPORTS_PER_SECOND);
      this.factor = Math.min(GUARD_MAX_SLOWDOWN, Math.max(1, this.factor * step));
      this.second = second;
      this.heard = 0;
    }
    this.heard++;
    return this.factor;
  }
}
