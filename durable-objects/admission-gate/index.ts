import { DurableObject } from 'cloudflare:workers';
import type { Lease, RateShare } from '../../workers/kernel/contract';
import { resetEdgeObjectIfAsked } from '../../workers/kernel/dev-faults';
import { TokenBucket } from '../../workers/kernel/token-bucket';
import { RateShares } from './shares';

/**
 * One per goods (see admissionGate in ../routing): splits the goods' admission rate among the
 * isolates selling it, each of which admits its share on its own (workers/edge/admission.ts)
 * and renews it every couple of seconds. The shares live in memory: a restarted gate hears
 * from every busy isolate again within one renewal.
 */
export class AdmissionGate extends DurableObject<Env> {
  private readonly bucket = new TokenBucket();
  private readonly shares = new RateShares();

  /** This isolate's share of `ratePerSecond`, given the purchases per second it sees. */
  async share(isolate: string, demandPerSecond: number, ratePerSecond: number): Promise<Required<RateShare>> {
    if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
      resetEdgeObjectIfAsked(this.ctx);
    }
    return this.shares.share(isolate, demandPerSecond, ratePerSecond, Date.now());
  }

  /** Admission permits as builds before the shares leased them: up to `want` at `ratePerSecond`, or how long until there are some. */
  async lease(want: number, ratePerSecond: number): Promise<Lease> {
    return this.bucket.take(want, ratePerSecond, Date.now());
  }
}
