// Shoppers for the bench, made in this process with the project's own code. Purchase tokens
// live 60 s, so tens of thousands of them cannot come through the HTTP flow in time; the bench
// runs the Worker with secrets it chose, and signs JWTs (hono/jwt, as POST /api/dev/token does)
// and purchase tokens and hidden paths (workers/signed.ts, as POST .../token does) itself.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const root = fileURLToPath(new URL('../../..', import.meta.url));

/** The two signing functions, bundled from the project's sources for Node. */
async function loadSigners() {
  const out = await build({
    stdin: {
      contents: "export { issuePurchaseToken } from './workers/signed.ts';\nexport { sign } from 'hono/jwt';\n",
      resolveDir: root,
      loader: 'ts',
    },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    write: false,
    logLevel: 'error',
  });
  const dir = await mkdtemp(join(tmpdir(), 'edge-seckill-signers-'));
  const file = join(dir, 'signers.mjs');
  try {
    await writeFile(file, out.outputFiles[0].text);
    return await import(pathToFileURL(file).href);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Fresh secrets for one bench run (the Worker gets them as bindings). */
export function benchSecrets() {
  return {
    AUTH_JWT_SECRET: randomBytes(32).toString('hex'),
    TOKEN_SECRET: randomBytes(32).toString('hex'),
  };
}

/** A minter bound to the run's secrets. */
export async function shopperMinter(secrets) {
  const { issuePurchaseToken, sign } = await loadSigners();
  const CHUNK = 500;
  return {
    /** `count` shoppers `${prefix}-${i}` with a JWT each (valid for an hour). */
    async users(prefix, count) {
      const now = Math.floor(Date.now() / 1000);
      const users = [];
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
    async tokens(users, goodsId) {
      const out = [];
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
