// The server's clock, as seen from the page. A flash sale opens at the server's second,
// whatever the device's clock says, so every countdown runs on `serverClock.now()`.

export type ClockSample = {
  /** The server's time in the answer (ms). */
  serverTime: number;
  /** Device time when the request was sent and when the answer arrived (ms). */
  sentAt: number;
  receivedAt: number;
};

/**
 * Offset (server - device) from one round trip, assuming the server stamped its answer
 * half-way through: the error is at most half the round trip.
 */
export function sampleOffset(sample: ClockSample): number {
  return sample.serverTime - (sample.sentAt + sample.receivedAt) / 2;
}

/** A sample older than this is replaced even by a slower one: device clocks drift and jump. */
const SAMPLE_MAX_AGE_MS = 60_000;

type Best = { offset: number; rtt: number; at: number };

export class ServerClock {
  private best: Best | undefined;

  constructor(private readonly deviceNow: () => number = () => Date.now()) {}

  /** Takes a round trip into account: the fastest recent one wins, it bounds the error best. */
  add(sample: ClockSample): void {
    const rtt = Math.max(0, sample.receivedAt - sample.sentAt);
    const offset = sampleOffset(sample);
    const best = this.best;
    const stale = best !== undefined && this.deviceNow() - best.at > SAMPLE_MAX_AGE_MS;
    // Two samples that cannot both be right (beyond their error bounds plus a second) mean
    // the device clock was changed: trust the newer one.
    const jumped = best !== undefined && Math.abs(offset - best.offset) > (best.rtt + rtt) / 2 + 1000;
    if (!best || stale || jumped || rtt <= best.rtt) {
      this.best = { offset, rtt, at: sample.receivedAt };
    }
  }

  get synced(): boolean {
    return this.best !== undefined;
  }

  /** Server minus device time (ms); 0 before the first sample. */
  get offset(): number {
    return this.best?.offset ?? 0;
  }

  /** The best known error bound (half the fastest round trip), ms. */
  get uncertaintyMs(): number {
    return this.best ? this.best.rtt / 2 : Number.POSITIVE_INFINITY;
  }

  /** The server's time now (ms). */
  now(): number {
    return this.deviceNow() + this.offset;
  }
}
