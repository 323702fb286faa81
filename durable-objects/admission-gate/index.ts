import { DurableObject } from 'cloudflare:workers';
import type { Lease } from '../../workers/kernel/contract';
import { TokenBucket } from './bucket';

/**
 * One per goods (see admissionGate in ../routing): the goods' admission bucket, leased to
 * isolates in small batches (workers/edge/admission.ts). The bucket lives in memory: it spans a
 * tenth of a second, and a restarted gate starting afresh lets through no more than a full one.
 */
export class AdmissionGate extends DurableObject<Env> {
  private readonly bucket = new TokenBucket();

  /** Admission permits: up to `want` at `ratePerSecond`, or how long until there are some. */
  async lease(want: number, ratePerSecond: number): Promise<Lease> {
    return this.bucket.take(want, ratePerSecond, Date.now());
  }
}
