// The deployable builds, as `npm run check` and `npm run deploy` make them: wrangler's
// dry-run of each environment, the configuration each one resolves to, and the production
// bundle itself running under Miniflare with production settings.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Log, LogLevel, Miniflare } from 'miniflare';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unstable_getMiniflareWorkerOptions, unstable_readConfig } from 'wrangler';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const configPath = join(root, 'wrangler.toml');
const ENVS = ['staging', 'production'] as const;

// Strings only the dev token route, the sandbox payment provider and the chaos run's fault
// switches contain (workers/http/routes/dev.ts, workers/payments/sandbox*.ts,
// workers/http/routes/dev-faults.ts and workers/kernel/dev-faults.ts with its hooks, and the
// object-call counter workers/kernel/object-calls.ts that durable-objects/routing.ts wraps stubs in).
const DEV_ONLY_MARKERS = [
  '/api/dev',
  'devOnly',
  'sandboxOnly',
  'payments-sandbox.internal',
  '/api/payments/sandbox/',
  '/dev/faults',
  'devFaultsOnly',
  'dev fault:',
  'queueSendFails',
  'consumerPaused',
  'WaitingRoom hub',
  // The reset of the edge's objects (guard shards, limits, admission gate, metrics shards).
  'edgeWaitMs',
  'byTraffic',
];

type Build = { bundle: string; output: string };
let outDir: string;
const builds: Record<string, Build> = {};

async function dryRun(env: string | undefined): Promise<Build> {
  const dir = join(outDir, env ?? 'local');
  const args = ['node_modules/wrangler/bin/wrangler.js', 'deploy', '--dry-run', '--outdir', dir, '--env', env ?? ''];
  const { stdout, stderr } = await run(process.execPath, args, { cwd: root, maxBuffer: 16 * 1024 * 1024 });
  return { bundle: await readFile(join(dir, 'index.js'), 'utf8'), output: `${stdout}\n${stderr}` };
}

// wrangler's declarations leave its Config untyped here; these are the fields read below.
type Producer = { binding: string };
type RateLimit = { name: string; namespace_id: string; simple: unknown };

function readEnv(env: string | undefined) {
  return unstable_readConfig({ config: configPath, env }, { hideWarnings: true });
}

beforeAll(async () => {
  outDir = await mkdtemp(join(tmpdir(), 'seckill-build-'));
  // One at a time: each dry run also runs the [build] step, which writes web/public/js.
  builds.local = await dryRun(undefined);
  for (const env of ENVS) {
    builds[env] = await dryRun(env);
  }
});

afterAll(async () => {
  await rm(outDir, { recursive: true, force: true });
});

describe('local build (the markers are real)', () => {
  it('contains the dev token route, the sandbox provider and the fault switches', () => {
    for (const marker of DEV_ONLY_MARKERS) {
      expect(builds.local?.bundle, marker).toContain(marker);
    }
  });
});

describe('every build', () => {
  it("names no function at run time: esbuild's keepNames helper, called each time a closure is made, is off", () => {
    // The unminified local build shows the helper by its name; the others inherit the setting.
    expect(builds.local?.bundle).not.toContain('__name(');
    expect(builds.local?.bundle).toContain('export {');
  });
});

describe.each(ENVS)('%s build', (env) => {
  it('dry-runs without wrangler warnings about missing, non-inherited settings', () => {
    const output = builds[env]?.output ?? '';
    expect(output).toContain('--dry-run: exiting now.');
    expect(output).not.toMatch(/not inherited|WARNING/);
    expect(output).toContain(`env.ENVIRONMENT ("${env}")`);
    expect(output).toContain(`env.ORDER_QUEUE (seckill-orders-${env})`);
    expect(output).toContain(`env.TIMEOUT_QUEUE (seckill-order-timeouts-${env})`);
  });

  it('leaves out the dev token route, the sandbox payment provider and the fault switches', () => {
    const bundle = builds[env]?.bundle ?? '';
    expect(bundle.length).toBeGreaterThan(10_000);
    for (const marker of DEV_ONLY_MARKERS) {
      expect(bundle, marker).not.toContain(marker);
    }
  });

  it('resolves to its own Worker with every binding the local config has', () => {
    const top = readEnv(undefined);
    const c = readEnv(env);
    expect(c.name).toBe(`edge-seckill-${env}`);
    expect(c.define).toEqual({ __DEV_FEATURES__: 'false' });
    expect(c.vars).toMatchObject({ ENVIRONMENT: env, DEV_MODE: 'false' });
    expect(c.vars).not.toHaveProperty('ENABLE_SANDBOX_PAYMENTS', 'true');
    expect(c.minify).toBe(true);
    expect(c.compatibility_date).toBe(top.compatibility_date);
    expect(c.compatibility_flags).toEqual(top.compatibility_flags);
    expect(c.observability?.enabled).toBe(true);
    expect(c.assets?.directory).toBe(top.assets?.directory);
    expect(c.assets?.binding).toBe(top.assets?.binding);
    expect(c.triggers.crons).toEqual(top.triggers.crons);
    expect(c.triggers.crons?.length).toBeGreaterThan(0);
    expect(c.migrations).toEqual(top.migrations);
    expect(c.durable_objects.bindings).toEqual(top.durable_objects.bindings);
    expect((c.queues.producers ?? []).map((p: Producer) => p.binding).sort()).toEqual(
      (top.queues.producers ?? []).map((p: Producer) => p.binding).sort(),
    );
    // The top level sets no ENVIRONMENT (unset is production); each environment names itself.
    expect(Object.keys(c.vars).sort()).toEqual([...Object.keys(top.vars), 'ENVIRONMENT'].sort());
  });

  it('has the same rate-limit bindings as the local config, in namespaces of its own', () => {
    const top: RateLimit[] = readEnv(undefined).ratelimits ?? [];
    const mine: RateLimit[] = readEnv(env).ratelimits ?? [];
    expect(mine.map((r) => [r.name, r.simple])).toEqual(top.map((r) => [r.name, r.simple]));
    const others = [undefined, ...ENVS.filter((e) => e !== env)].flatMap((e) =>
      (readEnv(e).ratelimits ?? []).map((r: RateLimit) => r.namespace_id),
    );
    for (const r of mine) {
      expect(others).not.toContain(r.namespace_id);
    }
  });
});

describe('the production bundle under Miniflare', () => {
  const secrets = {
    AUTH_JWT_SECRET: 'a3f9c2e17b5d4086e9f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7',
    ADMIN_TOKEN: '5e8d7c6b5a49382716f5e4d3c2b1a0f9e8d7c6b5a4938271605f4e3d2c1b0a9f',
    TOKEN_SECRET: '0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0',
    PAYMENT_WEBHOOK_SECRET: 'c0ffee15900dd00dfacade123456789abcdef0123456789abcdef0fedcba98765',
    DATABASE_URL: 'postgres://app:pw@ep-quiet-sun-123456.eu-central-1.aws.neon.tech/neondb?sslmode=require',
    TURNSTILE_SECRET_KEY: '0x4AAAAAAAsecretKEY1234567890abcdefg',
    TURNSTILE_SITE_KEY: '0x4AAAAAAAB1cD2eF3gH4iJ5',
  };
  let logs = '';
  let onLog: (() => void) | undefined;

  function captureStdio(stdout: Readable, stderr: Readable): void {
    for (const stream of [stdout, stderr]) {
      stream.on('data', (chunk: Buffer) => {
        logs += chunk.toString();
        onLog?.();
      });
    }
  }

  /** Resolves once the runtime has printed `text` (its stdio is piped asynchronously). */
  function logged(text: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no log line with ${text}; got:\n${logs}`)), 10_000);
      onLog = () => {
        if (logs.includes(text)) {
          clearTimeout(timer);
          resolve();
        }
      };
      onLog();
    });
  }

  /** The production bundle (or the one built without --env) with its config's bindings and `bindings`. */
  async function start(bindings: Record<string, string>, build: 'production' | 'no-env' = 'production'): Promise<Miniflare> {
    const env = build === 'production' ? 'production' : undefined;
    const { workerOptions } = unstable_getMiniflareWorkerOptions(configPath, env);
    const dir = join(outDir, env ?? 'local');
    const mf = new Miniflare({
      ...workerOptions,
      bindings: { ...workerOptions.bindings, ...bindings },
      modules: true,
      scriptPath: join(dir, 'index.js'),
      modulesRoot: dir,
      cf: false,
      handleRuntimeStdio: captureStdio,
      log: new Log(LogLevel.WARN),
    } as ConstructorParameters<typeof Miniflare>[0]);
    await mf.ready;
    return mf;
  }

  it('serves with production secrets, and has no dev token or sandbox routes', async () => {
    const mf = await start(secrets);
    try {
      const health = await mf.dispatchFetch('https://sale.shop.test/api/health');
      expect(health.status).toBe(200);
      const token = await mf.dispatchFetch('https://sale.shop.test/api/dev/token', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ userId: 'mallory' }),
      });
      expect(token.status).toBe(404);
      expect(((await token.json()) as { error: { code: string } }).error.code).toBe('NOT_FOUND');
      const sandbox = await mf.dispatchFetch('https://sale.shop.test/api/payments/sandbox/p1/complete', { method: 'POST' });
      expect(sandbox.status).toBe(404);
    } finally {
      await mf.dispose();
    }
  });

  it('a build without --env is no development Worker: it refuses to serve with a bundle of dev features', async () => {
    // wrangler.toml's top level names no environment, so a bare deploy gets production's rules...
    expect(readEnv(undefined).vars).not.toHaveProperty('ENVIRONMENT');
    logs = '';
    const mf = await start(secrets, 'no-env');
    try {
      // ...and its bundle, which keeps the dev token route and the sandbox, fails every request.
      const res = await mf.dispatchFetch('https://sale.shop.test/api/health');
      expect(res.status).toBe(500);
      expect(await res.text()).toContain('the service is misconfigured');
      const token = await mf.dispatchFetch('https://sale.shop.test/api/dev/token', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ userId: 'mallory' }),
      });
      expect(token.status).toBe(500);
      await logged('config.invalid');
      const line = logs.split('\n').find((l) => l.includes('config.invalid')) ?? '';
      expect(line).toContain('__DEV_FEATURES__');
      expect(line).toContain('deploy with --env production');
    } finally {
      await mf.dispose();
    }
  });

  it('fails fast without a required secret, naming it in the log but not to the client', async () => {
    const { ADMIN_TOKEN: _dropped, ...withoutAdmin } = secrets;
    logs = '';
    const mf = await start(withoutAdmin);
    try {
      const res = await mf.dispatchFetch('https://sale.shop.test/api/health');
      expect(res.status).toBe(500);
      const body = await res.text();
      expect(body).toContain('the service is misconfigured');
      expect(body).not.toContain('ADMIN_TOKEN');
      await logged('config.invalid');
      const line = logs.split('\n').find((l) => l.includes('config.invalid')) ?? '';
      expect(line).toContain('ADMIN_TOKEN: is required');
      expect(line).toContain(JSON.parse(body).error.requestId);
    } finally {
      await mf.dispose();
    }
  });
});
