// The fingerprints an isolate keeps of an allowlist (workers/edge/allowlist-copies.ts): a shopper
// on the list is always found, one off it practically never (a 53-bit fingerprint: about one in
// 2^53 / n tries), whatever the ids look like.
import { describe, expect, it } from 'vitest';
import { fingerprint, fingerprintsOf, forgetAllowlists, holds, keepCopy, listedAtEdge } from '../../workers/edge/allowlist-copies';
import type { Config } from '../../workers/kernel/config';

/** Ids of the shapes shops use: sequential numbers, prefixed numbers, hex (uuid-like), e-mail-like. */
function ids(n: number, salt: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    switch (i % 4) {
      case 0:
        out.push(`${salt}${i}`);
        break;
      case 1:
        out.push(`user-${salt}-${i}`);
        break;
      case 2:
        out.push(`${(i * 2654435761).toString(16).padStart(12, '0')}-${salt}-4a1b-9c2d-${i.toString(16).padStart(12, '0')}`);
        break;
      default:
        out.push(`shopper.${i}@${salt}.example`);
    }
  }
  return out;
}

describe('allowlist fingerprints', () => {
  it('are whole numbers below 2^53, the same for the same id, apart for 200,000 ids', () => {
    const listed = ids(200_000, 'a');
    const prints = listed.map(fingerprint);
    expect(prints.every((p) => Number.isSafeInteger(p) && p >= 0)).toBe(true);
    expect(fingerprint(listed[7] as string)).toBe(prints[7]);
    expect(new Set(prints).size).toBe(listed.length);
  });

  it('find every listed shopper and none of 1,000,000 others', () => {
    const listed = ids(200_000, 'a');
    const kept = fingerprintsOf(listed);
    expect(kept).toHaveLength(listed.length);
    expect(listed.every((id) => holds(kept, fingerprint(id)))).toBe(true);
    const others = ids(1_000_000, 'b');
    expect(others.filter((id) => holds(kept, fingerprint(id)))).toEqual([]);
    // Ids one character apart from listed ones.
    expect(listed.slice(0, 50_000).filter((id) => holds(kept, fingerprint(`${id}x`)))).toEqual([]);
  });

  it('an empty list holds nobody; a list of one holds its shopper', () => {
    expect(holds(fingerprintsOf([]), fingerprint('anyone'))).toBe(false);
    expect(holds(fingerprintsOf(['only']), fingerprint('only'))).toBe(true);
    expect(holds(fingerprintsOf(['only']), fingerprint('onlx'))).toBe(false);
  });
});

describe("an isolate's copies", () => {
  it('keep at most the bound of fingerprints over all goods, dropping the copies loaded longest ago', () => {
    forgetAllowlists();
    const config = { databaseUrl: 'postgres://copies.test/db' } as Config;
    const copy = (n: number) => ({ version: 1, fingerprints: fingerprintsOf(Array.from({ length: n }, (_, i) => `c-${i}`)) });
    keepCopy(`${config.databaseUrl}|1`, copy(40), 100);
    keepCopy(`${config.databaseUrl}|2`, copy(40), 100);
    keepCopy(`${config.databaseUrl}|1`, copy(40), 100); // loaded again: now the newest
    keepCopy(`${config.databaseUrl}|3`, copy(40), 100); // 120 > 100: goods 2 goes
    const listed = (goodsId: number) =>
      listedAtEdge(config, { id: goodsId, allowlistVersion: 1, createdAt: new Date(0) }, 'c-7', undefined);
    expect([listed(1), listed(2), listed(3)]).toEqual([true, undefined, true]);
    // One copy over the bound alone is still kept: the newest always is.
    keepCopy(`${config.databaseUrl}|4`, copy(150), 100);
    expect([listed(1), listed(3), listed(4)]).toEqual([undefined, undefined, true]);
    forgetAllowlists();
  });
});
