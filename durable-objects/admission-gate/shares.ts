// How an admission gate splits its goods' rate among the isolates selling it: in proportion to
// the requests each saw lately, among those that asked within SOURCE_TTL_MS. Pure (callers pass `now`).

/** An isolate's share lasts this long; it renews well before. */
export const SHARE_VALID_MS = 5_000;
/** An isolate that has not renewed for this long no longer takes part of the rate. */
const SOURCE_TTL_MS = SHARE_VALID_MS;

/** The demand each isolate last told the gate, and when. */
export class RateShares {
  private readonly sources = new Map<string, { demand: number; at: number }>();

  /** `isolate`'s share of `rate` per second, given the requests per second it sees now. */
  share(isolate: string, demandPerSecond: number, rate: number, now: number): { perSecond: number; validMs: number } {
    this.sources.set(isolate, { demand: Math.max(demandPerSecond, 0.1), at: now });
    let total = 0;
    for (const [id, s] of this.sources) {
      if (now - s.at > SOURCE_TTL_MS) {
        this.sources.delete(id);
      } else {
        total += s.demand;
      }
    }
    if (rate <= 0) {
      return { perSecond: 0, validMs: SHARE_VALID_MS };
    }
    const own = this.sources.get(isolate)?.demand ?? 0;
    return { perSecond: (rate * own) / total, validMs: SHARE_VALID_MS };
  }
}
