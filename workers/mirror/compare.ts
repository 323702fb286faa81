import type { MirrorView } from './client';
import { goodsOps, type MirrorGoods } from './plan';

/** A way the mirror differs from the goods' object. */
export type MirrorDiscrepancy =
  | { kind: 'mirror_stock'; expected: number; found: number | null }
  | { kind: 'mirror_users'; expected: number; found: number }
  | { kind: 'mirror_goods'; field: string; expected: string; found: string | null };

/** What the object says the mirror should hold. */
export type MirrorExpectation = {
  goods: MirrorGoods;
  remaining: number;
  holders: number;
  /** A stock shard: its part of the stock is compared; the shared holders set is not its own to count. */
  stockPart?: string;
};

/** Compares the mirror with the object's state. Pure: the caller reads both sides. */
export function compareMirror(expected: MirrorExpectation, view: MirrorView): MirrorDiscrepancy[] {
  const found: MirrorDiscrepancy[] = [];
  const stock = expected.stockPart === undefined ? view.stock : (view.part ?? null);
  if (stock !== expected.remaining) {
    found.push({ kind: 'mirror_stock', expected: expected.remaining, found: stock });
  }
  if (expected.stockPart === undefined && view.users !== expected.holders) {
    found.push({ kind: 'mirror_users', expected: expected.holders, found: view.users });
  }
  const [hash] = goodsOps(expected.goods);
  if (hash?.op === 'hset') {
    for (const [field, value] of Object.entries(hash.fields)) {
      const actual = view.goods[field] ?? null;
      if (actual !== value) {
        found.push({ kind: 'mirror_goods', field, expected: value, found: actual });
      }
    }
  }
  return found;
}
