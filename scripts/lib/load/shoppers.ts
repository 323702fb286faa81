// Shoppers for a load test: who they are (a JWT each), how they answer a challenge, as a
// browser running the shopper page would, and which of them tries next.
import { readFile } from 'node:fs/promises';
import { POW_ALGORITHM, solvePow } from '../../../workers/kernel/pow.ts';
import { type Challenge, read, type TokenBody } from './contract.ts';
import type { Answer, HttpClient } from './http-client.ts';

/** A shopper: who the JWT says it is, and the JWT. */
export type Shopper = { userId: string; jwt: string };

/** The `sub` of a JWT, read without verifying it (the Worker verifies). */
export function jwtSubject(jwt: string): string | undefined {
  const [, payload] = jwt.split('.');
  try {
    const claims: unknown = JSON.parse(Buffer.from(payload ?? '', 'base64url').toString('utf8'));
    const sub = typeof claims === 'object' && claims !== null && 'sub' in claims ? claims.sub : undefined;
    return typeof sub === 'string' && sub.length > 0 ? sub : undefined;
  } catch {
    return undefined;
  }
}

/** JWTs from a file, one per line (blank lines and `#` comments skipped); each must carry a `sub`. */
export async function readJwtFile(file: string): Promise<Shopper[]> {
  const lines = (await readFile(file, 'utf8')).split('\n').map((l) => l.trim());
  const shoppers: Shopper[] = [];
  const seen = new Set<string>();
  lines.forEach((jwt, i) => {
    if (!jwt || jwt.startsWith('#')) {
      return;
    }
    const userId = jwtSubject(jwt);
    if (!userId) {
      throw new Error(`${file}:${i + 1}: not a JWT with a "sub" claim`);
    }
    if (!seen.has(userId)) {
      seen.add(userId);
      shoppers.push({ userId, jwt });
    }
  });
  return shoppers;
}

/**
 * Dev JWTs from the deployment's own `POST /api/dev/token` (DEV_MODE only), `concurrency` at
 * a time; `onProgress(done)` is called as they arrive.
 */
export async function devShoppers(
  http: HttpClient,
  { count, prefix, concurrency, onProgress }: { count: number; prefix: string; concurrency: number; onProgress?: (done: number) => void },
): Promise<Shopper[]> {
  const shoppers = new Array<Shopper>(count);
  let next = 0;
  let done = 0;
  async function worker() {
    while (next < count) {
      const i = next++;
      const userId = `${prefix}-${i}`;
      let answer: Answer | undefined;
      for (let attempt = 0; attempt < 3; attempt++) {
        answer = await http.post('/api/dev/token', { json: { userId } });
        if (answer.status === 200) {
          break;
        }
      }
      const token = read.devToken(answer?.json)?.token;
      if (answer?.status !== 200 || token === undefined) {
        const why = answer?.status === 404 ? ' (the deployment does not run with DEV_MODE=true: pass --jwt-file)' : '';
        throw new Error(`POST /api/dev/token answered HTTP ${answer?.status ?? 0}${why}`);
      }
      shoppers[i] = { userId, jwt: token };
      onProgress?.(++done);
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return shoppers;
}

/** "3 + 4 = ?" -> "7"; undefined for a prompt this tool cannot read. */
export function solveArithmetic(prompt: unknown): string | undefined {
  const m = typeof prompt === 'string' ? prompt.match(/^\s*(\d+)\s*\+\s*(\d+)\s*=\s*\?\s*$/) : null;
  return m ? String(Number(m[1]) + Number(m[2])) : undefined;
}

/**
 * A proof-of-work nonce, found as the shopper page finds one (the Worker's own solver: the
 * first nonce in the same order, so the same one the page sends).
 */
async function powNonceFor({ prefix, difficulty, algorithm }: NonNullable<Challenge['pow']>): Promise<string> {
  if (algorithm !== POW_ALGORITHM) {
    throw new Error(`unknown proof-of-work algorithm ${algorithm}`);
  }
  return solvePow(prefix, difficulty, 2 ** 32);
}

/** What to send for a challenge, or why this tool cannot answer it. */
export type ChallengeAnswer = { body: TokenBody; error?: undefined } | { body?: undefined; error: string };

/**
 * The body of `POST .../token` for a challenge answer, or an error message when this tool
 * cannot answer it (Turnstile without --turnstile-token, or an answer that is no challenge).
 */
export async function challengeAnswer(
  json: unknown,
  { turnstileToken }: { turnstileToken?: string | undefined } = {},
): Promise<ChallengeAnswer> {
  const challenge = read.challenge(json);
  if (!challenge) {
    return { error: `unreadable challenge ${JSON.stringify(json)?.slice(0, 200)}` };
  }
  const powNonce = challenge.pow ? await powNonceFor(challenge.pow) : undefined;
  const extra = powNonce ? { powNonce } : {};
  if (challenge.kind === 'arithmetic') {
    const answer = solveArithmetic(challenge.prompt);
    return answer ? { body: { challengeId: challenge.challengeId, answer, ...extra } } : { error: `unreadable prompt ${challenge.prompt}` };
  }
  if (challenge.kind === 'turnstile') {
    if (!turnstileToken) {
      return { error: 'the deployment asks for Turnstile: pass --turnstile-token (with Turnstile test keys configured)' };
    }
    const id = challenge.challengeId === 'turnstile' ? {} : { challengeId: challenge.challengeId };
    return { body: { turnstileToken, ...id, ...extra } };
  }
  return { error: `unknown challenge kind ${challenge.kind}` };
}

/** One purchase attempt: who makes it, and whether they tried before. */
export type Attempt = { shopper: Shopper; duplicate: boolean };

/**
 * Which shopper makes the next purchase attempt: new shoppers in order, with a share coming
 * back for another try. Without a request count or a duration it ends when every shopper has
 * tried once; with one, shoppers keep coming back once all have tried.
 */
export function attemptPlan(shoppers: Shopper[], { duplicates, requests }: { duplicates: number; requests: number | undefined }) {
  const tried: number[] = [];
  let fresh = 0;
  let issued = 0;
  let deadline: number | undefined;
  let exhausted = false;
  const isDone = () => exhausted || (requests !== undefined && issued >= requests) || (deadline !== undefined && Date.now() >= deadline);
  return {
    setDeadline(at: number) {
      deadline = at;
    },
    get done() {
      return isDone();
    },
    next(): Attempt | undefined {
      if (isDone()) {
        return undefined;
      }
      const bounded = requests !== undefined || deadline !== undefined;
      const again = tried.length > 0 && (Math.random() < duplicates || (fresh >= shoppers.length && bounded));
      if (!again && fresh >= shoppers.length) {
        exhausted = true;
        return undefined;
      }
      issued++;
      const shopper = again ? shoppers[tried[Math.floor(Math.random() * tried.length)] ?? 0] : shoppers[fresh];
      if (!shopper) {
        exhausted = true;
        return undefined;
      }
      if (again) {
        return { shopper, duplicate: true };
      }
      tried.push(fresh++);
      return { shopper, duplicate: false };
    },
  };
}
