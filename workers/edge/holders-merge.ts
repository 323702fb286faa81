import type { HolderChange } from '../../db/holders';
import { fingerprint, fingerprintIndex } from './allowlist-copies';

// The data of the edge's copies of who holds live orders (holders-copies.ts keeps and renews
// them): sorted fingerprints with a holding beside each, merged with a read's changes in one walk,
// and the bytes a data center shares them as.

/** Units are below this (a goods' `perUserLimit` is at most 100): a holding is goods × UNITS + units. */
export const UNITS = 128;

/** A copy of an activity's or goods' holders. */
export type Holders = {
  /** Postgres' clock at the read the copy is as of. */
  asOf: number;
  /** Postgres' clock at the last whole read it builds on. */
  wholeAt: number;
  /** The reading isolate's clock at that read: the copy's age. */
  at: number;
  /** Sorted fingerprints of the holders, and at the same index their holding; null: too many to keep. */
  fingerprints: Float64Array | null;
  holdings: Float64Array | null;
};

export const EMPTY = new Float64Array(0);

/**
 * Sorted holders after `changes` (oldest first): a live change makes its shopper a holder of its
 * goods' units; one no longer live ends its shopper's holding only if it was of that goods (in an
 * activity the shopper may have ordered again since, elsewhere). Units above UNITS - 1 are kept as
 * UNITS - 1 (a goods' limit is at most 100).
 */
export function applyChanges(
  fingerprints: Float64Array,
  holdings: Float64Array,
  changes: readonly HolderChange[],
): { fingerprints: Float64Array; holdings: Float64Array } {
  // Each changed shopper's holding after the changes (0: none).
  const changed = new Map<number, number>();
  for (const c of changes) {
    const fp = fingerprint(c.userId);
    if (c.live) {
      changed.set(fp, c.goodsId * UNITS + Math.min(c.quantity, UNITS - 1));
      continue;
    }
    let now = changed.get(fp);
    if (now === undefined) {
      const i = fingerprintIndex(fingerprints, fp);
      now = i < 0 ? 0 : (holdings[i] as number);
    }
    if (now !== 0 && Math.floor(now / UNITS) === c.goodsId) {
      changed.set(fp, 0);
    }
  }
  // One walk over the holders and the changed shoppers, both sorted: a Map lookup per change only.
  const moved = Float64Array.from(changed.keys()).sort();
  const outFp = new Float64Array(fingerprints.length + moved.length);
  const outHolding = new Float64Array(fingerprints.length + moved.length);
  let i = 0,
    j = 0,
    k = 0;
  while (i < fingerprints.length || j < moved.length) {
    const held = i < fingerprints.length ? (fingerprints[i] as number) : Number.POSITIVE_INFINITY;
    const next = j < moved.length ? (moved[j] as number) : Number.POSITIVE_INFINITY;
    if (held < next) {
      outFp[k] = held;
      outHolding[k++] = holdings[i++] as number;
      continue;
    }
    const holding = changed.get(next) as number;
    if (holding !== 0) {
      outFp[k] = next;
      outHolding[k++] = holding;
    }
    j++;
    if (held === next) {
      i++;
    }
  }
  return { fingerprints: outFp.slice(0, k), holdings: outHolding.slice(0, k) };
}

/** Header numbers of a copy's bytes: asOf, wholeAt, at, and the holders' count (-1: too many to keep). */
const HEADER = 4;

/** A copy as the data center keeps it: the header, the fingerprints, then the holdings (8 bytes each). */
export function encode(copy: Holders): Uint8Array {
  const n = copy.fingerprints?.length ?? 0;
  const out = new Float64Array(HEADER + 2 * n);
  out.set([copy.asOf, copy.wholeAt, copy.at, copy.fingerprints ? n : -1]);
  if (copy.fingerprints && copy.holdings) {
    out.set(copy.fingerprints, HEADER);
    out.set(copy.holdings, HEADER + n);
  }
  return new Uint8Array(out.buffer);
}

/** A copy from the data center's bytes (views on them, nothing copied); undefined for none or bytes of another shape. */
export function decode(bytes: ArrayBuffer | undefined): Holders | undefined {
  if (!bytes || bytes.byteLength % 8 !== 0 || bytes.byteLength < HEADER * 8) {
    return undefined;
  }
  const all = new Float64Array(bytes);
  const [asOf = 0, wholeAt = 0, at = 0, n = 0] = all;
  if (n >= 0 && all.length !== HEADER + 2 * n) {
    return undefined;
  }
  const whole = n >= 0;
  return {
    asOf,
    wholeAt,
    at,
    fingerprints: whole ? all.subarray(HEADER, HEADER + n) : null,
    holdings: whole ? all.subarray(HEADER + n) : null,
  };
}
