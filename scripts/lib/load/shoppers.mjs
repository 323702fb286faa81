// Shoppers for a load test: who they are (a JWT each) and how they answer a challenge, as a
// browser running the shopper page would.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';

/** The `sub` of a JWT, read without verifying it (the Worker verifies). */
export function jwtSubject(jwt) {
  const [, payload] = jwt.split('.');
  try {
    const sub = JSON.parse(Buffer.from(payload ?? '', 'base64url').toString('utf8')).sub;
    return typeof sub === 'string' && sub.length > 0 ? sub : undefined;
  } catch {
    return undefined;
  }
}

/** JWTs from a file, one per line (blank lines and `#` comments skipped); each must carry a `sub`. */
export async function readJwtFile(file) {
  const lines = (await readFile(file, 'utf8')).split('\n').map((l) => l.trim());
  const shoppers = [];
  const seen = new Set();
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
export async function devShoppers(http, { count, prefix, concurrency, onProgress }) {
  const shoppers = new Array(count);
  let next = 0;
  let done = 0;
  async function worker() {
    while (next < count) {
      const i = next++;
      const userId = `${prefix}-${i}`;
      let answer;
      for (let attempt = 0; attempt < 3; attempt++) {
        answer = await http.post('/api/dev/token', { json: { userId } });
        if (answer.status === 200) {
          break;
        }
      }
      if (answer?.status !== 200 || typeof answer.json?.token !== 'string') {
        const why = answer?.status === 404 ? ' (the deployment does not run with DEV_MODE=true: pass --jwt-file)' : '';
        throw new Error(`POST /api/dev/token answered HTTP ${answer?.status ?? 0}${why}`);
      }
      shoppers[i] = { userId, jwt: answer.json.token };
      onProgress?.(++done);
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return shoppers;
}

/** "3 + 4 = ?" -> "7"; undefined for a prompt this tool cannot read. */
export function solveArithmetic(prompt) {
  const m = typeof prompt === 'string' ? prompt.match(/^\s*(\d+)\s*\+\s*(\d+)\s*=\s*\?\s*$/) : null;
  return m ? String(Number(m[1]) + Number(m[2])) : undefined;
}

function leadingZeroBits(bytes) {
  let bits = 0;
  for (const byte of bytes) {
    if (byte === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}

/**
 * A proof-of-work nonce as the shopper page finds one: SHA-256(prefix + nonce) with
 * `difficulty` leading zero bits. Yields to the event loop every few thousand hashes, so a
 * solving shopper does not stall the others' requests.
 */
export async function solvePow({ prefix, difficulty, algorithm }) {
  if (algorithm !== 'sha256-leading-zero-bits') {
    throw new Error(`unknown proof-of-work algorithm ${algorithm}`);
  }
  for (let i = 0; i < 2 ** 32; i++) {
    const nonce = i.toString(36);
    if (
      leadingZeroBits(
        createHash('sha256')
          .update(prefix + nonce)
          .digest(),
      ) >= difficulty
    ) {
      return nonce;
    }
    if (i % 4096 === 4095) {
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
  throw new Error('no proof-of-work nonce found');
}

/**
 * The body of `POST .../token` for a challenge answer, or an error message when this tool
 * cannot answer it (Turnstile without --turnstile-token).
 */
export async function challengeAnswer(challenge, { turnstileToken } = {}) {
  const powNonce = challenge.pow ? await solvePow(challenge.pow) : undefined;
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
