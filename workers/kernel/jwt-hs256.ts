import { fromBase64Url } from './crypto';

// HS256 JSON Web Tokens, verified the way hono/jwt's verify() does (the same header, claim and
// signature checks, tests/workers/jwt-hs256.unit.test.ts holds them side by side), with less
// work per token: a flash crowd is thousands of shoppers the isolate has not seen, each with a
// token to verify once. A login signs every token with the same header, so a header's checks
// run once per distinct header text; the payload and signature are decoded once, straight
// from their characters; the key is the caller's, imported once (crypto.ts hmacKey).

/** Why a token was refused; the caller answers 401 whatever the reason. */
export class JwtInvalid extends Error {
  override name = 'JwtInvalid';
}

/** The claims this project reads; everything else in the payload is kept as it came. */
export type JwtClaims = {
  [claim: string]: unknown;
  sub?: unknown;
  exp?: unknown;
  nbf?: unknown;
  iat?: unknown;
  iss?: unknown;
  aud?: unknown;
};

/** What a token must carry beyond a valid signature: `iss` and `aud` when configured. */
export type JwtExpectations = { iss?: string | undefined; aud?: string | undefined };

const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });
const encoder = new TextEncoder();

/** Header texts already read: true when it is a usable HS256 header. A login uses one or two. */
const headers = new Map<string, boolean>();
const HEADERS_MAX = 64;

/** A segment's bytes; padding is not part of a JWT, but hono tolerates it, so this does too. */
function segmentBytes(segment: string): Uint8Array | undefined {
  return fromBase64Url(segment.endsWith('=') ? segment.replace(/={1,2}$/, '') : segment);
}

/** The parts of a JWT segment's JSON, or undefined when it is not base64url of a JSON object. */
function segmentJson(segment: string): Record<string, unknown> | undefined {
  const bytes = segmentBytes(segment);
  if (bytes === undefined) {
    return undefined;
  }
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(bytes));
  } catch {
    return undefined;
  }
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

/** alg HS256, a `typ` of JWT if any, no `crit` extensions to honour. */
function usableHeader(text: string): boolean {
  let usable = headers.get(text);
  if (usable === undefined) {
    const header = segmentJson(text);
    usable =
      header !== undefined &&
      header.alg === 'HS256' &&
      (!('typ' in header) || (typeof header.typ === 'string' && header.typ.toLowerCase().replace(/^application\//, '') === 'jwt')) &&
      !('crit' in header);
    if (headers.size >= HEADERS_MAX) {
      headers.clear();
    }
    headers.set(text, usable);
  }
  return usable;
}

function finiteNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/** The time claims and the expected issuer and audience, as hono checks them. */
function checkClaims(payload: JwtClaims, expect: JwtExpectations, nowSeconds: number): void {
  if (payload.nbf !== undefined && !(finiteNumber(payload.nbf) && payload.nbf <= nowSeconds)) {
    throw new JwtInvalid('the token is not valid yet (nbf)');
  }
  if (payload.exp !== undefined && !(finiteNumber(payload.exp) && payload.exp > nowSeconds)) {
    throw new JwtInvalid('the token has expired (exp)');
  }
  if (payload.iat !== undefined && !(finiteNumber(payload.iat) && payload.iat <= nowSeconds)) {
    throw new JwtInvalid('the token was issued in the future (iat)');
  }
  if (expect.iss && payload.iss !== expect.iss) {
    throw new JwtInvalid('the token is from another issuer (iss)');
  }
  if (expect.aud) {
    const aud = payload.aud;
    const audiences = Array.isArray(aud) ? aud : [aud];
    if (!aud || !audiences.includes(expect.aud)) {
      throw new JwtInvalid('the token is for another audience (aud)');
    }
  }
}

/** Whether the token's header says HS256 in a form verifyHs256 takes (read once per header text). */
export function signedWithHs256(token: string): boolean {
  const end = token.indexOf('.');
  return end > 0 && usableHeader(token.slice(0, end));
}

/**
 * The payload of an HS256 token signed with `key`, checked as hono/jwt's verify() with
 * `{alg: 'HS256', iss, aud}` checks it: a usable header, nbf, exp and iat against `now`, the
 * issuer and audience when expected, then the signature. Throws JwtInvalid otherwise.
 */
export async function verifyHs256(token: string, key: CryptoKey, expect: JwtExpectations, now: number): Promise<JwtClaims> {
  const first = token.indexOf('.');
  const last = token.lastIndexOf('.');
  if (first < 0 || first === last || token.indexOf('.', first + 1) !== last) {
    throw new JwtInvalid('a token has three parts');
  }
  if (!usableHeader(token.slice(0, first))) {
    throw new JwtInvalid('the token is not an HS256 JWT');
  }
  const payload = segmentJson(token.slice(first + 1, last));
  if (payload === undefined) {
    throw new JwtInvalid('the token payload is not a JSON object');
  }
  checkClaims(payload, expect, Math.floor(now / 1000));
  const signature = segmentBytes(token.slice(last + 1));
  if (signature === undefined || !(await crypto.subtle.verify('HMAC', key, signature, encoder.encode(token.slice(0, last))))) {
    throw new JwtInvalid('the token signature does not match');
  }
  return payload;
}

/** Forgets the headers read (tests). */
export function clearJwtHeaders(): void {
  headers.clear();
}
