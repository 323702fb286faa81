import type { z } from 'zod';
import { fromBase64Url, hmacB64, safeEqual, toBase64Url } from './crypto';

// Stateless signed blobs: `base64url(json).base64url(hmac)` under a secret. The purpose is
// signed with the body, so a blob made for one use (a challenge, a purchase token, a waiting-room
// ticket or pass) never opens as another. Single use, where it matters, is enforced where a blob
// is spent, not here.

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Signs `payload` for `purpose`. */
export async function sealBlob(secret: string, purpose: string, payload: object): Promise<string> {
  const body = toBase64Url(encoder.encode(JSON.stringify(payload)));
  return `${body}.${await hmacB64(secret, `${purpose}|${body}`)}`;
}

/** The payload of a blob sealed for `purpose`, when its signature holds and it fits `schema`; blobs over `maxLength` are refused unread. */
export async function openBlob<T>(
  secret: string,
  purpose: string,
  blob: string,
  schema: z.ZodType<T>,
  maxLength: number,
): Promise<T | undefined> {
  const dot = blob.indexOf('.');
  if (dot <= 0 || blob.length > maxLength) {
    return undefined;
  }
  const body = blob.slice(0, dot);
  if (!safeEqual(blob.slice(dot + 1), await hmacB64(secret, `${purpose}|${body}`))) {
    return undefined;
  }
  return peekBlob(blob, schema, maxLength);
}

/**
 * The payload a blob claims, read WITHOUT checking its signature: only for decisions that send a
 * request on to the check, never for letting one through.
 */
export function peekBlob<T>(blob: string, schema: z.ZodType<T>, maxLength: number): T | undefined {
  const dot = blob.indexOf('.');
  const bytes = dot > 0 && blob.length <= maxLength ? fromBase64Url(blob.slice(0, dot)) : undefined;
  if (!bytes) {
    return undefined;
  }
  try {
    const parsed = schema.safeParse(JSON.parse(decoder.decode(bytes)));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
