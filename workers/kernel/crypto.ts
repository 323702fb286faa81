import { timePrefix } from './time-order';

// HMAC-SHA256 helpers over WebCrypto. Imported keys are cached per secret: importKey costs
// more than the signature itself on the purchase path. The cache holds keys, never the
// promise of one: a request must not await a promise another request created (workerd
// cancels it if that request ends first), so a request that finds no key imports its own.
const encoder = new TextEncoder();
const keys = new Map<string, CryptoKey>();

/** The HMAC-SHA256 key of `secret`, for signing and verifying. */
export async function hmacKey(secret: string): Promise<CryptoKey> {
  let key = keys.get(secret);
  if (!key) {
    key = await crypto.subtle.importKey('raw', encoder.encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']);
    if (keys.size >= 16) {
      keys.clear();
    }
    keys.set(secret, key);
  }
  return key;
}

/** HMAC-SHA256 of `data` under `secret`, raw bytes. */
export async function hmac(secret: string, data: string | Uint8Array): Promise<Uint8Array> {
  const sig = await crypto.subtle.sign('HMAC', await hmacKey(secret), typeof data === 'string' ? encoder.encode(data) : data);
  return new Uint8Array(sig);
}

/** HMAC-SHA256 as lowercase hex (the payment webhook's X-Signature). */
export async function hmacHex(secret: string, data: string | Uint8Array): Promise<string> {
  return toHex(await hmac(secret, data));
}

/** HMAC-SHA256 as base64url, optionally truncated to `chars`. */
export async function hmacB64(secret: string, data: string, chars?: number): Promise<string> {
  const s = toBase64Url(await hmac(secret, data));
  return chars ? s.slice(0, chars) : s;
}

/** SHA-256 as base64url, optionally truncated. */
export async function sha256B64(data: string, chars?: number): Promise<string> {
  const s = toBase64Url(new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(data))));
  return chars ? s.slice(0, chars) : s;
}

/**
 * Compares two strings in time independent of where they differ: every code unit of `b` is
 * looked at, and the differences are gathered without a branch on them. Straight from the
 * characters, as timingSafeEqual does it from bytes: a purchase compares two signatures, and
 * encoding both of them first cost more than their HMACs' comparison needs (about 2 µs each).
 */
export function safeEqual(a: string, b: string): boolean {
  // A length mismatch still compares `b` with itself, so the time does not reveal the prefix.
  const x = a.length === b.length ? a : b;
  let diff = a.length ^ b.length;
  for (let i = 0; i < b.length; i++) {
    diff |= x.charCodeAt(i) ^ b.charCodeAt(i);
  }
  return diff === 0;
}

export function toHex(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) {
    s += b.toString(16).padStart(2, '0');
  }
  return s;
}

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
/** Each 6-bit value's base64url character code. */
const B64URL_CODES = Uint8Array.from(B64URL, (ch) => ch.charCodeAt(0));
const decoder = new TextDecoder();
/** The characters of the encoding under way (one at a time: toBase64Url does not await). */
let chars = new Uint8Array(64);

/**
 * base64url without padding; straight from the bytes (ids and signatures are made on every
 * purchase), as character codes decoded once into the string: built by concatenation, four
 * characters at a time, it made a short string or a rope for every three bytes (about 1 KB of
 * garbage for a 32-byte signature) and took 1.4 times as long.
 */
export function toBase64Url(bytes: Uint8Array): string {
  const length = Math.ceil((bytes.length * 4) / 3);
  if (chars.length < length) {
    chars = new Uint8Array(length);
  }
  let o = 0;
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = ((bytes[i] ?? 0) << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    chars[o++] = B64URL_CODES[n >> 18] ?? 0;
    chars[o++] = B64URL_CODES[(n >> 12) & 63] ?? 0;
    chars[o++] = B64URL_CODES[(n >> 6) & 63] ?? 0;
    chars[o++] = B64URL_CODES[n & 63] ?? 0;
  }
  const rest = bytes.length - i;
  if (rest > 0) {
    const n = ((bytes[i] ?? 0) << 16) | (rest === 2 ? (bytes[i + 1] ?? 0) << 8 : 0);
    chars[o++] = B64URL_CODES[n >> 18] ?? 0;
    chars[o++] = B64URL_CODES[(n >> 12) & 63] ?? 0;
    if (rest === 2) {
      chars[o++] = B64URL_CODES[(n >> 6) & 63] ?? 0;
    }
  }
  return decoder.decode(chars.subarray(0, o));
}

/** Each base64url character's 6 bits, by char code; -1 for everything else. */
const B64URL_BITS = new Int8Array(128).fill(-1);
for (let i = 0; i < B64URL.length; i++) {
  B64URL_BITS[B64URL.charCodeAt(i)] = i;
}

/** The 6 bits of the character at `i`; -1 outside the alphabet. */
function bitsAt(s: string, i: number): number {
  return B64URL_BITS[s.charCodeAt(i)] ?? -1;
}

/**
 * Unpadded base64url to bytes, as `atob` reads it after the alphabet swap; undefined for any
 * other character (padding included) or a length no encoding has (4n + 1). Straight from the
 * characters: every purchase decodes its token this way.
 */
export function fromBase64Url(text: string): Uint8Array | undefined {
  const rest = text.length % 4;
  if (rest === 1) {
    return undefined;
  }
  const out = new Uint8Array(Math.floor((text.length * 3) / 4));
  let o = 0;
  let i = 0;
  for (; i + 3 < text.length; i += 4) {
    const a = bitsAt(text, i);
    const b = bitsAt(text, i + 1);
    const c = bitsAt(text, i + 2);
    const d = bitsAt(text, i + 3);
    if ((a | b | c | d) < 0) {
      return undefined;
    }
    const n = (a << 18) | (b << 12) | (c << 6) | d;
    out[o++] = n >> 16;
    out[o++] = (n >> 8) & 255;
    out[o++] = n & 255;
  }
  if (rest >= 2) {
    const a = bitsAt(text, i);
    const b = bitsAt(text, i + 1);
    const c = rest === 3 ? bitsAt(text, i + 2) : 0;
    if ((a | b | c) < 0) {
      return undefined;
    }
    const n = (a << 18) | (b << 12) | (c << 6);
    out[o++] = n >> 16;
    if (rest === 3) {
      out[o++] = (n >> 8) & 255;
    }
  }
  return out;
}

/** 22 url-safe random characters (132 bits). */
export function randomId(): string {
  return toBase64Url(crypto.getRandomValues(new Uint8Array(17))).slice(0, 22);
}

/**
 * 22 url-safe characters that sort by the millisecond they were made: the time in 9 base-36
 * digits (to the year 5188), then 13 random characters (78 bits). For ids a Durable Object
 * keys rows by: a new row's index entry lands beside the last ones, where a random key dirties a
 * page of its own in each index it is in (SQLite writes every dirty page at commit, and the
 * cost of random keys grew with the table: 16 to 29 µs a row between 7,000 and 35,000 rows,
 * against 7-10 µs in time order).
 */
export function timeOrderedId(now = Date.now()): string {
  return `${timePrefix(now)}${randomId().slice(0, 13)}`;
}
