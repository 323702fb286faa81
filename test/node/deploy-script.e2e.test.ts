// `npm run deploy` stops at the first failure: a stand-in wrangler (WRANGLER=...) records what
// it was asked to do, so these runs need no Cloudflare account. The success path ends in a
// real `wrangler deploy` and a Neon database with TLS, which only a real account can try.
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tsNode } from '../../scripts/lib/run-ts.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const ALL = [
  'AUTH_JWT_SECRET',
  'ADMIN_TOKEN',
  'TOKEN_SECRET',
  'PAYMENT_WEBHOOK_SECRET',
  'DATABASE_URL',
  'TURNSTILE_SECRET_KEY',
  'TURNSTILE_SITE_KEY',
];
// Resolves nowhere (.invalid is reserved), so a migration attempt fails fast and offline.
const UNREACHABLE_NEON = 'postgres://app:pw@ep-none.eu-central-1.aws.neon.invalid/neondb?sslmode=require';

let dir: string;
let fake: string;
let calls: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'seckill-deploy-'));
  fake = join(dir, 'wrangler');
  calls = join(dir, 'calls.log');
  await writeFile(
    fake,
    `#!${process.execPath}
import { appendFileSync } from 'node:fs';
const args = process.argv.slice(2);
appendFileSync(process.env.FAKE_CALLS, args.join(' ') + '\\n');
if (args[0] === 'secret' && args[1] === 'list') {
  if (process.env.FAKE_LIST_FAILS) {
    console.error('You are not authenticated. Please run wrangler login.');
    process.exit(1);
  }
  console.log(JSON.stringify((process.env.FAKE_SECRETS ?? '').split(',').filter(Boolean).map((name) => ({ name, type: 'secret_text' }))));
} else if (args[0] === 'deploy') {
  console.log('Uploaded edge-seckill (fake)');
}
`,
  );
  await chmod(fake, 0o755);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function deploy(args: string[], env: Record<string, string | undefined>) {
  await writeFile(calls, '');
  const childEnv: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    WRANGLER: fake,
    FAKE_CALLS: calls,
  };
  for (const [k, v] of Object.entries(env)) {
    if (v !== undefined) {
      childEnv[k] = v;
    }
  }
  const child = spawn(...tsNode('scripts/deploy.ts', ...args), { cwd: root, env: childEnv });
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, out, calls: (await readFile(calls, 'utf8')).split('\n').filter(Boolean) };
}

describe('npm run deploy', () => {
  it('refuses an unknown environment before doing anything', async () => {
    const r = await deploy(['--env', 'prod'], { DATABASE_URL: UNREACHABLE_NEON, FAKE_SECRETS: ALL.join(',') });
    expect(r.code).toBe(2);
    expect(r.out).toContain('--env must be one of staging, production (got "prod")');
    expect(r.calls).toEqual([]);
  });

  it('needs DATABASE_URL in the shell to migrate', async () => {
    const r = await deploy(['--env', 'staging'], { FAKE_SECRETS: ALL.join(',') });
    expect(r.code).toBe(1);
    expect(r.out).toContain('DATABASE_URL is not set in this shell');
    expect(r.calls).toEqual([]);
  });

  it('refuses to migrate a local database in place of the Worker one', async () => {
    const r = await deploy([], { DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres', FAKE_SECRETS: ALL.join(',') });
    expect(r.code).toBe(1);
    expect(r.out).toContain('DATABASE_URL points at 127.0.0.1');
    expect(r.out).toContain('DATABASE_URL must use TLS');
    expect(r.calls).toEqual([]);
  });

  it('stops when the secrets cannot be listed (not logged in)', async () => {
    const r = await deploy(['--env', 'staging'], { DATABASE_URL: UNREACHABLE_NEON, FAKE_LIST_FAILS: '1' });
    expect(r.code).toBe(1);
    expect(r.out).toContain('could not list the secrets of edge-seckill-staging');
    expect(r.calls).toEqual(['secret list --env staging --format json']);
  });

  it('names every missing secret and neither migrates nor deploys', async () => {
    const r = await deploy([], {
      DATABASE_URL: UNREACHABLE_NEON,
      FAKE_SECRETS: ALL.filter((n) => n !== 'ADMIN_TOKEN' && !n.startsWith('TURNSTILE')).join(','),
    });
    expect(r.code).toBe(1);
    expect(r.out).toContain('edge-seckill-production is not ready');
    expect(r.out).toContain('ADMIN_TOKEN is not set');
    expect(r.out).toContain('production requires Turnstile');
    expect(r.out).toContain('npx wrangler secret put NAME --env production');
    expect(r.out).not.toContain('db:migrate');
    expect(r.calls).toEqual(['secret list --env production --format json']);
  });

  it('does not deploy when the migration fails', async () => {
    const r = await deploy(['--env=staging'], { DATABASE_URL: UNREACHABLE_NEON, FAKE_SECRETS: ALL.join(',') });
    expect(r.code).toBe(1);
    expect(r.out).toContain('7 secrets present on edge-seckill-staging');
    expect(r.out).toContain('migrating postgres://app:***@ep-none');
    expect(r.out).toMatch(/db:migrate: .* failed: /);
    expect(r.out).toContain('migrations failed; nothing was deployed');
    expect(r.calls).toEqual(['secret list --env staging --format json']);
  });
});
