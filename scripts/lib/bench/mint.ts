// Shoppers for the bench, made in this process with the project's own code. Purchase tokens
// live 60 s, so tens of thousands of them cannot come through the HTTP flow in time; the bench
// runs the Worker with secrets it chose, and signs JWTs (hono/jwt, as POST /api/dev/token does)
// and purchase tokens and hidden paths (workers/edge/signed.ts, as POST .../token does) itself.
import { randomBytes } from 'node:crypto';
import { sign } from 'hono/jwt';

/** The Worker's issuePurchaseToken (workers/edge/signed.ts), as far as the bench calls it. */
type IssuePurchaseToken = (secret: string, userId: string, goodsId: number, ttlMs: number) => Promise<{ token: string; path: string }>;

export type BenchSecrets = { AUTH_JWT_SECRET: string; TOKEN_SECRET: string };
export type BenchUser = { userId: string; jwt: string };
export type ReadyUser = BenchUser & { token: string; path: string };
export type Minter = Awaited<ReturnType<typeof shopperMinter>>;

/**
 * The Worker's own token signer. Loaded at run time (this process runs under tsx, which
 * loads the Worker's TypeScript) rather than imported: the signer's module is written for
 * workerd's globals, which the Node side's type check does not include.
 */
async function loadIssuePurchaseToken(): Promise<IssuePurchaseToken> {
  const signed: { issuePurchaseToken?: unknown } = await import(new URL('../../../workers/edge/signed.ts', import.meta.url).href);
  const issue = signed.issuePurchaseToken;
  if (typeof issue !== 'function') {
    throw new Error('workers/edge/signed.ts no longer exports issuePurchaseToken');
  }
  return (secret, userId, goodsId, ttlMs) => issue(secret, userId, goodsId, ttlMs);
}

/** Fresh secrets for one bench run (the Worker gets them as bindings). */
export function benchSecrets(): BenchSecrets {
  return {
    AUTH_JWT_SECRET: randomBytes(32).toString('hex'),
    TOKEN_SECRET: randomBytes(32).toString('hex'),
  };
}

/** A minter bound to the run's secrets. */
export async function shopperMinter(secrets: BenchSecrets) {
  const issuePurchaseToken = await loadIssuePurchaseToken();
  const CHUNK = 500;
  return {
    /** `count` shoppers `${prefix}-${i}` with a JWT each (valid for an hour). */
    async users(prefix: string, count: number): Promise<BenchUser[]> {
      const now = Math.floor(Date.now() / 1000);
      const users: BenchUser[] = [];
      for (let i = 0; i < count; i += CHUNK) {
        const chunk = await Promise.all(
          Array.from({ length: Math.min(CHUNK, count - i) }, async (_, k) => {
            const userId = `${prefix}-${i + k}`;
            return { userId, jwt: await sign({ sub: userId, iat: now, exp: now + 3600 }, secrets.AUTH_JWT_SECRET, 'HS256') };
          }),
        );
        users.push(...chunk);
      }
      return users;
    },
    /** A purchase token and hidden path for each user, for one goods (valid 60 s from now). */
    async tokens(users: BenchUser[], goodsId: number): Promise<ReadyUser[]> {
      const out: ReadyUser[] = [];
      for (let i = 0; i < users.length; i += CHUNK) {
        const chunk = await Promise.all(
          users.slice(i, i + CHUNK).map(async (u) => {
            const issued = await issuePurchaseToken(secrets.TOKEN_SECRET, u.userId, goodsId, 60_000);
            return { ...u, token: issued.token, path: issued.path };
          }),
        );
        out.push(...chunk);
      }
      return out;
    },
  };
}
