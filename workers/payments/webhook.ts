import { hmacHex, safeEqual } from '../kernel/crypto';
import { PaymentCallbackBody } from '../kernel/http-bodies';

const HEX_SHA256 = /^[0-9a-f]{64}$/;

/**
 * Checks `X-Signature` (hex HMAC-SHA256 of the raw body under the webhook secret) in constant
 * time. Verified over the exact bytes received, before anything is parsed.
 */
export async function verifyWebhookSignature(secret: string, rawBody: string, header: string | undefined): Promise<boolean> {
  const given = header?.trim().toLowerCase();
  if (!given || !HEX_SHA256.test(given)) {
    return false;
  }
  return safeEqual(given, await hmacHex(secret, rawBody));
}

export type ParsedWebhook = { ok: true; event: PaymentCallbackBody } | { ok: false; message: string };

/** Parses a verified webhook body. */
export function parseWebhookBody(rawBody: string): ParsedWebhook {
  let json: unknown;
  try {
    json = JSON.parse(rawBody);
  } catch {
    return { ok: false, message: 'the body is not JSON' };
  }
  const parsed = PaymentCallbackBody.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { ok: false, message: `body ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'is invalid'}` };
  }
  return { ok: true, event: parsed.data };
}
