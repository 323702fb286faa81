import type { RateShare } from '../../workers/kernel/contract';

// How an admission gate splits its goods' rate among the isolates selling it: in proportion to
// the requests each saw lately, among those whose share has not lapsed. It also paces them: an
// isolate renews every SHARE_RENEW_MS, or less often once so many isolates sell the goods that
// the gate would hear from them more than GATE_CALLS_PER_SECOND times a second, so the one
// gate of a goods stays far below an object's limit however large the fleet. Pure (callers
// pass `now`).

/** How often an isolate renews its share while few isolates sell the goods. */
export const SHARE_RENEW_MS = 2_000;
/** The renewals a second the gate spaces its isolates out to, at most. */
export const GATE_CALLS_PER_SECOND = 250;
/** A share lasts this many renewal intervals, so a lost renewal or two do not lapse it. */
const VALID_RENEWALS = 2.5;
/** A share's life while few isolates sell the goods; an isolate that has not renewed by then takes no part of the rate. */
export const SHARE_VALID_MS = SHARE_RENEW_MS * VALID_RENEWALS;
/** Lapsed isolates are dropped, and the demand total summed afresh, at most this often. */
const EXPIRE_EVERY_MS = 1_000;

/** The demand each isolate last told the gate, and until when its share holds. */
export class RateShares {
  private readonly sources = new Map<string, { demand: number; until: number }>();
  private total = 0;
  private expireAt = 0;

  /** `isolate`'s share of `rate` per second, given the requests per second it sees now, and when to ask again. */
  share(isolate: string, demandPerSecond: number, rate: number, now: number): Required<RateShare> {
    this.expire(now);
    const prior = this.sources.get(isolate);
    const isolates = this.sources.size + (prior ? 0 : 1);
    const renewMs = Math.max(SHARE_RENEW_MS, Math.ceil((isolates * 1000) / GATE_CALLS_PER_SECOND));
    const validMs = renewMs * VALID_RENEWALS;
    const demand = Math.max(demandPerSecond, 0.1);
    this.total += demand - (prior?.demand ?? 0);
    this.sources.set(isolate, { demand, until: now + validMs });
    const perSecond = rate <= 0 ? 0 : (rate * demand) / this.total;
    return { perSecond, validMs, renewMs };
  }

  /** Isolates whose share has not lapsed. */
  get isolates(): number {
    return this.sources.size;
  }

  private expire(now: number): void {
    if (now < this.expireAt) {
      return;
    }
    this.expireAt = now + EXPIRE_EVERY_MS;
    let total = 0;
    for (const [id, s] of this.sources) {
      if (now >= s.until) {
        this.sources.delete(id);
      } else {
        total += s.demand;
      }
    }
    this.total = total;
  }
}
