// Ids and keys that sort by the time they were made. The goods' object keys rows by them: a new
// row's index entry lands beside the last ones, where a random key dirties a page of its own in
// each index it is in, which SQLite writes at commit. Imports nothing and uses only what browsers,
// Node and workerd share: the shopper page and the tools take their keys from here too.

/** The 9 base-36 digits of `ms` that begin a time-ordered id (the last 9 past the year 5188). */
export function timePrefix(ms: number): string {
  return Math.max(0, Math.floor(ms)).toString(36).padStart(9, '0').slice(-9);
}

/**
 * An Idempotency-Key in the layout of a UUID version 7 (RFC 9562): the time in 48 bits of Unix
 * milliseconds, then 74 random bits. The shopper page sends these: a keyed purchase's request id
 * is derived from its key, and begins with the time of a key in this layout (keyTimeMs), so the
 * goods' object indexes keyed purchases in time order too.
 */
export function timeOrderedKey(now = Date.now()): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  let ms = Math.max(0, Math.floor(now));
  for (let i = 5; i >= 0; i--) {
    b[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  b[6] = 0x70 | ((b[6] ?? 0) & 0x0f);
  b[8] = 0x80 | ((b[8] ?? 0) & 0x3f);
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const UUID_V7 = /^([0-9a-f]{8})-([0-9a-f]{4})-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

/** The Unix milliseconds a key in UUID version 7's layout carries (timeOrderedKey); undefined for any other key. */
export function keyTimeMs(key: string): number | undefined {
  const m = UUID_V7.exec(key);
  return m ? Number.parseInt(`${m[1]}${m[2]}`, 16) : undefined;
}
