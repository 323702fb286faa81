import { describe, expect, it } from 'vitest';
import { purchaseIdOf } from '../../workers/edge/purchase';
import { RequestId } from '../../workers/kernel/contract';
import { fromBase64Url, randomId, safeEqual, sha256B64, timeOrderedId, toBase64Url } from '../../workers/kernel/crypto';
import { keyTimeMs, timeOrderedKey } from '../../workers/kernel/time-order';

/** base64url by the book: btoa, then the URL alphabet, no padding. */
function reference(bytes: Uint8Array): string {
  return btoa(String.fromCharCode(...bytes))
    .replaceAll('+', '-')
    .replaceAll('/', '_')
    .replace(/=+$/, '');
}

describe('base64url', () => {
  it('encodes every length and every byte value as btoa does, and decodes back', () => {
    for (let length = 0; length <= 70; length++) {
      const bytes = crypto.getRandomValues(new Uint8Array(length));
      expect(toBase64Url(bytes)).toBe(reference(bytes));
      expect(fromBase64Url(toBase64Url(bytes))).toEqual(bytes);
    }
    const all = Uint8Array.from({ length: 256 }, (_, i) => i);
    expect(toBase64Url(all)).toBe(reference(all));
    expect(toBase64Url(new Uint8Array([251, 255, 191]))).toBe('-_-_');
  });

  it('decodes what atob decodes, bits past the last byte ignored, and refuses what atob or the alphabet refuses', () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const viaAtob = (s: string) => {
      const bin = atob(s.replaceAll('-', '+').replaceAll('_', '/') + '='.repeat((4 - (s.length % 4)) % 4));
      return Uint8Array.from(bin, (c) => c.charCodeAt(0));
    };
    for (let length = 0; length <= 41; length++) {
      if (length % 4 === 1) {
        continue;
      }
      for (let n = 0; n < 20; n++) {
        // Random characters, so the last one often carries bits no byte holds (atob drops them).
        const s = Array.from(crypto.getRandomValues(new Uint8Array(length)), (b) => alphabet[b % 64]).join('');
        expect(fromBase64Url(s)).toEqual(viaAtob(s));
      }
    }
    for (const bad of ['A', 'AAAAA', 'AA=', 'AAA=', 'AAAA==', 'AB+C', 'AB/C', 'AB C', 'ABCé', '\u0100AAA']) {
      expect(fromBase64Url(bad)).toBeUndefined();
    }
    expect(fromBase64Url('')).toEqual(new Uint8Array(0));
  });

  it('makes ids of 22 URL-safe characters', () => {
    const ids = new Set(Array.from({ length: 1000 }, () => randomId()));
    expect(ids.size).toBe(1000);
    for (const id of ids) {
      expect(id).toMatch(/^[A-Za-z0-9_-]{22}$/);
    }
  });

  it('makes time-ordered ids that sort by the millisecond they were made, and are a request id after the goods', () => {
    const start = Date.UTC(2026, 11, 3);
    const made = Array.from({ length: 1000 }, (_, i) => ({
      at: start + Math.floor(i / 3) * 7,
      id: timeOrderedId(start + Math.floor(i / 3) * 7),
    }));
    expect(new Set(made.map((m) => m.id)).size).toBe(1000);
    const sorted = [...made].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    expect(sorted.map((m) => m.at)).toEqual(made.map((m) => m.at));
    for (const { id } of made) {
      expect(id).toMatch(/^[0-9a-z]{9}[A-Za-z0-9_-]{13}$/);
      expect(RequestId.safeParse(`42.${id}`).success).toBe(true);
    }
    // Across a change in the number of base-36 digits the width stays 9, so the order holds.
    expect(timeOrderedId(36 ** 8 - 1) < timeOrderedId(36 ** 8)).toBe(true);
    expect(timeOrderedId(0)).toMatch(/^0{9}/);
  });
});

describe('keys in UUID version 7 layout', () => {
  it('carry the millisecond they were made, and are random after it', () => {
    const start = Date.UTC(2026, 11, 3, 18);
    const keys = Array.from({ length: 500 }, (_, i) => ({ at: start + i * 13, key: timeOrderedKey(start + i * 13) }));
    expect(new Set(keys.map((k) => k.key)).size).toBe(500);
    for (const { at, key } of keys) {
      expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(keyTimeMs(key)).toBe(at);
      expect(keyTimeMs(key.toUpperCase())).toBe(at);
    }
    expect(keyTimeMs(crypto.randomUUID())).toBeUndefined();
    expect(keyTimeMs('retry-1')).toBeUndefined();
    expect(keyTimeMs(`${timeOrderedKey()}x`)).toBeUndefined();
  });

  it("give keyed request ids in the keys' time order; any other key's id is its hash, as before", async () => {
    const start = Date.UTC(2026, 11, 3, 18);
    const made = await Promise.all(
      Array.from({ length: 300 }, async (_, i) => {
        const at = start + Math.floor(i / 2) * 5;
        const key = timeOrderedKey(at);
        return { at, key, id: await purchaseIdOf(42, `user-${i % 7}`, key) };
      }),
    );
    expect(new Set(made.map((m) => m.id)).size).toBe(300);
    const sorted = [...made].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    expect(sorted.map((m) => m.at)).toEqual(made.map((m) => m.at));
    for (const { id, key } of made.slice(0, 20)) {
      expect(RequestId.safeParse(id).success).toBe(true);
      // The same shopper's same key is the same request; another shopper's is another.
      expect(await purchaseIdOf(42, 'user-0', key)).toBe(await purchaseIdOf(42, 'user-0', key));
      expect(await purchaseIdOf(42, 'user-0', key)).not.toBe(await purchaseIdOf(42, 'user-1', key));
      expect(await purchaseIdOf(43, 'user-0', key)).not.toBe(await purchaseIdOf(42, 'user-0', key));
    }
    const uuid4 = crypto.randomUUID();
    expect(await purchaseIdOf(42, 'u', uuid4)).toBe(`42.${await sha256B64(`u|42|${uuid4}`, 22)}`);
    expect(await purchaseIdOf(42, 'u', 'retry-1')).toBe(`42.${await sha256B64('u|42|retry-1', 22)}`);
  });
});

describe('safeEqual', () => {
  it('is true only for the same string: a difference at any place, a length or a character outside ASCII makes it false', () => {
    const mac = 'Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFi';
    expect(safeEqual(mac, `${mac}`)).toBe(true);
    expect(safeEqual('', '')).toBe(true);
    for (let i = 0; i < mac.length; i++) {
      const changed = `${mac.slice(0, i)}${mac[i] === 'A' ? 'B' : 'A'}${mac.slice(i + 1)}`;
      expect(safeEqual(mac, changed)).toBe(false);
      expect(safeEqual(changed, mac)).toBe(false);
    }
    expect(safeEqual(mac, mac.slice(0, -1))).toBe(false);
    expect(safeEqual(mac.slice(0, -1), mac)).toBe(false);
    expect(safeEqual('', mac)).toBe(false);
    expect(safeEqual(mac, '')).toBe(false);
    expect(safeEqual('caf\u00e9', 'cafe')).toBe(false);
    expect(safeEqual('\u{1F600}', '\u{1F601}')).toBe(false);
  });
});
