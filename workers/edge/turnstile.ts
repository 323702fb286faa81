import { z } from 'zod';
import { log } from '../kernel/log';

// Cloudflare Turnstile, checked server-side with siteverify. A Turnstile token is single-use
// and lives 300 s at Cloudflare; the purchase token is issued only after a success, so the
// captcha's result is bound to the shopper and goods it was presented for.

export const SITEVERIFY_URL = 'https://challenges.cloudflare.com/turnstile/v0/siteverify';
const SITEVERIFY_TIMEOUT_MS = 5_000;

const SiteverifyAnswer = z.object({
  success: z.boolean(),
  'error-codes': z.array(z.string()).optional(),
  hostname: z.string().optional(),
  action: z.string().optional(),
});

export type TurnstileResult = { kind: 'passed' } | { kind: 'failed'; codes: string[] } | { kind: 'unavailable' };

/** Error codes that mean our configuration is wrong, not the shopper's answer. */
const OUR_FAULT = new Set(['missing-input-secret', 'invalid-input-secret', 'internal-error']);

/** Asks siteverify about a token; network trouble and our own misconfiguration are `unavailable`. */
export async function verifyTurnstile(secret: string, token: string, remoteIp: string | undefined): Promise<TurnstileResult> {
  let raw: unknown;
  try {
    const res = await fetch(SITEVERIFY_URL, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ secret, response: token, ...(remoteIp ? { remoteip: remoteIp } : {}) }),
      signal: AbortSignal.timeout(SITEVERIFY_TIMEOUT_MS),
    });
    raw = await res.json();
  } catch (error) {
    log.warn('turnstile.unreachable', { error });
    return { kind: 'unavailable' };
  }
  const answer = SiteverifyAnswer.safeParse(raw);
  if (!answer.success) {
    log.warn('turnstile.bad_answer', { issues: answer.error.issues.length });
    return { kind: 'unavailable' };
  }
  if (answer.data.success) {
    return { kind: 'passed' };
  }
  const codes = answer.data['error-codes'] ?? [];
  if (codes.some((c) => OUR_FAULT.has(c))) {
    log.error('turnstile.misconfigured', { codes });
    return { kind: 'unavailable' };
  }
  return { kind: 'failed', codes };
}
