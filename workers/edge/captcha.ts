import { guardShard } from '../../durable-objects/routing';
import type { Config } from '../kernel/config';
import { randomId, safeEqual } from '../kernel/crypto';
import { AppError } from '../kernel/errors';
import type { TokenBody } from '../kernel/http-bodies';
import { log } from '../kernel/log';
import { POW_ALGORITHM, verifyPow } from '../kernel/pow';
import { objectCall } from './object-unavailable';
import { answerHash, type Challenge, openChallenge, sealChallenge } from './signed';
import { verifyTurnstile } from './turnstile';

// Which challenge a shopper gets: Turnstile when TURNSTILE_SECRET_KEY/SITE_KEY are configured,
// the built-in arithmetic question otherwise. When the runtime limit `powDifficulty` is above
// 0, either kind also carries a proof of work that must be solved with it. Every challenge is
// sealed (HMAC) with the shopper, goods and expiry, and is spent in an EdgeGuard shard on its
// first use, right or wrong, so it cannot be replayed or brute-forced.

/** A challenge can be answered for this long, once. */
export const CHALLENGE_TTL_MS = 5 * 60_000;
/** The challenge id of a plain Turnstile challenge (nothing of ours to seal). */
const TURNSTILE_ONLY = 'turnstile';

export type ChallengeView = {
  challengeId: string;
  kind: 'turnstile' | 'arithmetic';
  prompt?: string;
  siteKey?: string;
  expiresAt: string;
  pow?: { prefix: string; difficulty: number; algorithm: string };
};

/** Issues a challenge for one shopper and goods. */
export async function issueChallenge(
  config: Config,
  powDifficulty: number,
  userId: string,
  goodsId: number,
  now: number,
): Promise<ChallengeView> {
  const expiresAt = now + CHALLENGE_TTL_MS;
  const nonce = randomId();
  const pow = powDifficulty > 0 ? { prefix: nonce, difficulty: powDifficulty, algorithm: POW_ALGORITHM } : undefined;
  const base = { u: userId, g: goodsId, e: expiresAt, n: nonce, ...(pow ? { d: pow.difficulty } : {}) };
  if (config.turnstile) {
    // With proof of work, the sealed challenge carries it; the human check is Turnstile's.
    const challengeId = pow ? await sealChallenge(config.tokenSecret, { ...base, k: 'pow', h: '' }) : TURNSTILE_ONLY;
    return {
      challengeId,
      kind: 'turnstile',
      siteKey: config.turnstile.siteKey,
      expiresAt: new Date(expiresAt).toISOString(),
      ...(pow ? { pow } : {}),
    };
  }
  const [a = 1, b = 1] = crypto.getRandomValues(new Uint8Array(2)).map((x) => 1 + (x % 9));
  const challengeId = await sealChallenge(config.tokenSecret, {
    ...base,
    k: 'arithmetic',
    h: await answerHash(config.tokenSecret, nonce, String(a + b)),
  });
  return {
    challengeId,
    kind: 'arithmetic',
    prompt: `${a} + ${b} = ?`,
    expiresAt: new Date(expiresAt).toISOString(),
    ...(pow ? { pow } : {}),
  };
}

function failed(message: string): AppError {
  return new AppError('CAPTCHA_FAILED', message);
}

/** The guard shard's key of a challenge's one use. */
const spentKey = (c: Challenge) => `challenge:${c.n}`;

/** Spends the challenge at its guard shard (one use); 503 UNAVAILABLE when the shard fails under the call (objectCall). */
async function spend(env: Env, c: Challenge): Promise<boolean> {
  const key = spentKey(c);
  return objectCall('captcha.spend_failed', { key }, 'the challenge cannot be checked right now, please retry', () =>
    guardShard(env, key).useOnce(key, c.e),
  );
}

/** A challenge a correct answer spent: what `returnChallenge` takes back. */
export type SpentChallenge = { key: string };

/**
 * Takes back the use of a challenge a correct answer spent, when the request then failed on a
 * dependency (the eligibility read in Postgres, Turnstile): the shopper's retry of the same
 * answer passes instead of costing a new challenge. A wrong answer's spend is never taken
 * back. Best effort: a failure here leaves the challenge spent, as before.
 */
export async function returnChallenge(env: Env, spent: SpentChallenge): Promise<void> {
  try {
    await guardShard(env, spent.key).unuse(spent.key);
  } catch (error) {
    log.warn('captcha.return_failed', { key: spent.key, error });
  }
}

/** Opens a sealed challenge and checks it belongs to this shopper and goods and is still valid. */
async function openOwn(config: Config, challengeId: string, userId: string, goodsId: number, now: number): Promise<Challenge> {
  const c = await openChallenge(config.tokenSecret, challengeId);
  if (!c || c.u !== userId || c.g !== goodsId) {
    throw failed('the challenge is unknown or not yours');
  }
  if (c.e <= now) {
    throw failed('the challenge has expired; request a new one');
  }
  return c;
}

/** Checks the proof of work a challenge asks for; a wrong one spends the challenge. */
async function checkPow(env: Env, c: Challenge, powNonce: string | undefined): Promise<void> {
  const difficulty = c.d ?? 0;
  if (difficulty <= 0) {
    return;
  }
  if (!powNonce || !(await verifyPow(c.n, powNonce, difficulty))) {
    await spend(env, c);
    throw failed(powNonce ? 'the proof of work is wrong' : 'this challenge needs a proof of work (powNonce)');
  }
}

/**
 * Passes the shopper's answer to a challenge or throws 403 CAPTCHA_FAILED (503 UNAVAILABLE when
 * Turnstile cannot be asked). Cheap checks first; the challenge is spent before Turnstile is
 * asked, so one challenge buys at most one siteverify call that answers (one Turnstile could
 * not answer gives the challenge back). The challenge the answer spent, if any, for the caller
 * to give back when a later step fails on a dependency (returnChallenge).
 */
export async function passChallenge(
  env: Env,
  config: Config,
  powDifficulty: number,
  body: TokenBody,
  who: { userId: string; goodsId: number; ip: string | undefined },
  now: number,
): Promise<SpentChallenge | undefined> {
  let spent: SpentChallenge | undefined;
  if (config.turnstile) {
    if (!('turnstileToken' in body)) {
      throw failed('answer the Turnstile challenge (turnstileToken)');
    }
    if (body.challengeId && body.challengeId !== TURNSTILE_ONLY) {
      const c = await openOwn(config, body.challengeId, who.userId, who.goodsId, now);
      if (c.k !== 'pow') {
        throw failed('the challenge is unknown or not yours');
      }
      await checkPow(env, c, body.powNonce);
      if (!(await spend(env, c))) {
        throw failed('the challenge was already used');
      }
      spent = { key: spentKey(c) };
    } else if (powDifficulty > 0) {
      throw failed('a proof of work is required; request a new challenge');
    }
    const verdict = await verifyTurnstile(config.turnstile.secretKey, body.turnstileToken, who.ip);
    if (verdict.kind === 'unavailable') {
      if (spent) {
        await returnChallenge(env, spent);
      }
      throw new AppError('UNAVAILABLE', 'the captcha service is unavailable, please retry', { 'retry-after': '2' });
    }
    if (verdict.kind === 'failed') {
      throw failed(`Turnstile refused the token (${verdict.codes.join(', ') || 'no reason given'})`);
    }
    return spent;
  }
  if (!('answer' in body)) {
    throw failed('Turnstile is not configured; answer the built-in challenge');
  }
  const c = await openOwn(config, body.challengeId, who.userId, who.goodsId, now);
  if (c.k !== 'arithmetic') {
    throw failed('the challenge is unknown or not yours');
  }
  await checkPow(env, c, body.powNonce);
  if (!safeEqual(await answerHash(config.tokenSecret, c.n, String(body.answer)), c.h)) {
    // A wrong answer spends the challenge too, so it cannot be brute-forced.
    await spend(env, c);
    throw failed('wrong answer');
  }
  if (!(await spend(env, c))) {
    throw failed('the challenge was already used');
  }
  return { key: spentKey(c) };
}
