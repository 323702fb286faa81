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

/** Compares two strings in time independent of where they differ. */
export function safeEqual(a: string, b: string): boolean {
  const x = encoder.encode(a);
  const y = encoder.encode(b);
  if (x.byteLength !== y.byteLength) {
    // Still compare something of equal length so the time does not reveal the prefix.
    crypto.subtle.timingSafeEqual(x, x);
    return false;
  }
  return crypto.subtle.timingSafeEqual(x, y);
}

export function toHex(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) {
    s += b.toString(16).padStart(2, '0');
  }
  return s;
}

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** base64url without padding; straight from the bytes (ids and signatures are made on every purchase). */
export function toBase64Url(bytes: Uint8Array): string {
  let out = '';
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = ((bytes[i] ?? 0) << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    out += B64URL.charAt(n >> 18) + B64URL.charAt((n >> 12) & 63) + B64URL.charAt((n >> 6) & 63) + B64URL.charAt(n & 63);
  }
  const rest = bytes.length - i;
  if (rest > 0) {
    const n = ((bytes[i] ?? 0) << 16) | (rest === 2 ? (bytes[i + 1] ?? 0) << 8 : 0);
    out += B64URL.charAt(n >> 18) + B64URL.charAt((n >> 12) & 63) + (rest === 2 ? B64URL.charAt((n >> 6) & 63) : '');
  }
  return out;
}

export function fromBase64Url(s: string): Uint8Array | undefined {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) {
    return undefined;
  }
  try {
    const bin = atob(s.replaceAll('-', '+').replaceAll('_', '/') + '='.repeat((4 - (s.length % 4)) % 4));
    return Uint8Array.from(bin, (c) => c.charCodeAt(0));
  } catch {
    return undefined;
  }
}

/** 22 url-safe random characters (132 bits). */
export function randomId(): string {
  return toBase64Url(crypto.getRandomValues(new Uint8Array(17))).slice(0, 22);
}
